"""Folder archives (``--archives``, issue 28): a listed directory as a
streamed ``.zip`` or ``.tar.gz`` (docs/features.md "Folder archives").

A vertical feature on the pipeline's hooks (:attr:`serverio.pipeline.hooks.Hooks.listing`):

* :mod:`~serverio.archive.zipenc`, :mod:`~serverio.archive.tarenc` (pure):
  the streaming encoders;
* :mod:`~serverio.archive.plan` (pure): the query, the name, the plan, the
  bounds;
* :mod:`~serverio.archive.walk` (blocking, in the ``fs`` pool): the
  contained scans, opens and reads;
* :mod:`~serverio.archive.stream`: the walk and the chunk source;
* :mod:`~serverio.archive.service`: :class:`Archives`, the hook.
"""
