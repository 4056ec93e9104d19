"""writes: the pure parts of uploads (issue 29): multipart and digests.

The rules for a client-supplied file name are :mod:`serverio.fs.names`'s,
beside the Windows name rules they reuse and the writer that applies them.

No trio, no filesystem, no sockets: every module here decides from its
inputs alone and is table-tested; the uploads (:mod:`serverio.upload`) use it.
"""
