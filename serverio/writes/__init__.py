"""writes: the pure parts of uploads (issue 29): safe names, multipart, digests.

No trio, no filesystem, no sockets: every module here decides from its
inputs alone and is table-tested.  Not wired into the pipeline yet.
"""
