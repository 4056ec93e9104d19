"""Uploads: PUT and DELETE under the root (``--upload``): :mod:`.service`, :mod:`.decide`."""
