"""The Medbay node agent (`medbay-agent`). Standard library only; imports no Django."""
