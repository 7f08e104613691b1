"""How the reports page prints a figure."""

from __future__ import annotations

from django import template

from reports.base import formatted

register = template.Library()

register.filter("figure", formatted)
