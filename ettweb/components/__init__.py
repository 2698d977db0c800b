"""Owning components: who owns each kind of lost time, and their pages (``/components/<name>/``)."""
