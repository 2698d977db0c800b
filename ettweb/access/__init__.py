"""Who may change what: the viewer, component owner and admin roles (Django groups).

Every write the dashboard, the admin and the API accept asks :mod:`ettweb.access.roles`
first, so a page that hides an edit link and the server that refuses the write cannot
disagree.
"""
