"""dav: WebDAV (RFC 4918, issue 29), ``--webdav``.

The pure parts, no trio, no filesystem, no sockets, table-tested:
:mod:`~serverio.dav.xml` (XML bodies, the 207) and
:mod:`~serverio.dav.ifheader` (the DAV request fields).  The service on
top of them: :mod:`~serverio.dav.service` (the pipeline's write step),
:mod:`~serverio.dav.methods` (DELETE, COPY, MOVE),
:mod:`~serverio.dav.common`, :mod:`~serverio.dav.props` and
:mod:`~serverio.dav.answers` (properties and plans, pure decisions over
facts), and :mod:`~serverio.dav.guard`, the lock seam.  The filesystem
side is :mod:`serverio.fs.davtree`.
"""
