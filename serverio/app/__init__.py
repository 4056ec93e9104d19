"""The composition root: the application assembled outside the transports.

What a running server is made of, and which features it plugs in, is
decided here and only here: :mod:`serverio.app.services` builds the
shared services and registers the features (live reload, uploads,
WebDAV, archives, the proxy, the site rules) with the pipeline;
:mod:`serverio.app.server` is the public :class:`~serverio.app.server.Server`
and :mod:`serverio.app.lifecycle` its serve-then-shutdown order.  The
transports (:mod:`serverio.net`) import no feature package
(tests/test_layers_net.py holds it): they answer through the pipeline's
exchange (:mod:`serverio.pipeline.exchange`) and stream through the
seams of :mod:`serverio.pipeline.hooks`.
"""
