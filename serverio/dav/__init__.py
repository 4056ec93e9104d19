"""dav: the pure parts of WebDAV (RFC 4918, issue 29): XML bodies, 207, headers.

No trio, no filesystem, no sockets: every module here decides from its
inputs alone and is table-tested.  Not wired into the pipeline yet.
"""
