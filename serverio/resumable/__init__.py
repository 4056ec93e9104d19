"""Resumable uploads: the IETF draft (draft-ietf-httpbis-resumable-upload)
and tus 1.0, on one on-disk upload state (docs/reference/resumable-uploads.md).

* :mod:`serverio.resumable.protocol`: the pure part: which request is a
  resumable one (:func:`~serverio.resumable.protocol.classify`), its fields
  parsed, and every answer (plans) from request facts, the upload's state
  as read from disk, the policy and the time;
* :mod:`serverio.resumable.store`: the blocking part: the upload's hidden
  temporary and its info file in the target's directory, the lock that
  lets one appender win, the commit (one rename), the sweeper's scan;
* :mod:`serverio.resumable.service`: the small imperative adapter that
  plugs both into today's write hook (``Hooks.write``) in front of the
  uploads' step.
"""
