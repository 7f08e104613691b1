from django import template

from jobs.reasons import plain_reason as _plain_reason

register = template.Library()


@register.filter
def plain_reason(job) -> str:
    return _plain_reason(job)
