"""``{{ moment|workspace_time:workspace }}``: a time as the workspace reads it, in its
time zone and named (the same words notifications use in their text)."""

from django import template

from governance.notifications import local_time

register = template.Library()


@register.filter
def workspace_time(moment, workspace):
    if not moment:
        return ""
    return local_time(moment, workspace=workspace)
