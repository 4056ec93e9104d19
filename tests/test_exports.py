"""serverio's public exports, pinned (as trio's ``test_exports.py`` does).

One table, :data:`EXPORTS`, holds every module of the serverio package and
the names its ``__all__`` lists (``None``: the module has no ``__all__``).
The tests check that

* every module of the package is in the table and the table names no other;
* each module's ``__all__`` is a literal list without repeats, and lists
  exactly the table's names (the failure prints the row to paste);
* every exported name exists in its module, and none is private (``_x``);
* the top-level ``serverio`` namespace holds exactly ``__all__`` (no other
  public name, submodules aside), and that set is the one
  docs/architecture.md lists under "Public names".

Changing a module's interface is then a one-row edit here, reviewed with the
change.  ``__all__`` is read from the source (ast), so ``serverio.__main__``
(which runs the CLI when imported) is checked without importing it.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from pathlib import Path

import pytest

import serverio

PACKAGE = Path(serverio.__file__).resolve().parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

TOP_LEVEL: tuple[str, ...] = (
    "AccessLog",
    "AccessRecord",
    "Config",
    "ConfigError",
    "ConnectionEnv",
    "ConnectionTask",
    "Deferred",
    "FileFacts",
    "FileSpan",
    "HTTPError",
    "Handler",
    "Plan",
    "Pool",
    "PoolSaturated",
    "PoolStats",
    "Prepared",
    "RequestFacts",
    "Server",
    "Stats",
    "Target",
    "decide_directory",
    "decide_file",
    "error_plan",
    "evaluate_preconditions",
    "guess_type",
    "main",
    "parse_range",
    "parse_target",
    "prepare",
    "route",
    "run_blocking",
)

# module -> the names of its __all__ (sorted; compared as sets), or None.
EXPORTS: dict[str, tuple[str, ...] | None] = {
    "serverio": TOP_LEVEL,
    "serverio.__main__": None,
    "serverio.archive": None,
    "serverio.archive.plan": (
        "Bounds",
        "FORMATS",
        "Member",
        "QUERY_KEY",
        "archive_format",
        "archive_name",
        "archive_plan",
        "check_bounds",
    ),
    "serverio.archive.service": ("Archives",),
    "serverio.archive.stream": (
        "ArchiveCut",
        "ArchiveStream",
        "CHUNK_MIN",
        "READ_SIZE",
        "Visible",
        "walk",
    ),
    "serverio.archive.tarenc": ("TarEncoder",),
    "serverio.archive.walk": (
        "Opened",
        "Read",
        "close_opened",
        "close_read",
        "open_member",
        "read_span",
        "scan_at",
    ),
    "serverio.archive.zipenc": (
        "METHOD_DEFLATED",
        "METHOD_STORED",
        "ZIP64_LIMIT",
        "ZipEncoder",
        "check_segments",
        "encode_name",
    ),
    "serverio.concurrency": None,
    "serverio.concurrency.blocking": ("Pool", "PoolSaturated", "PoolStats", "run_blocking"),
    "serverio.concurrency.broadcast": (
        "Broadcast",
        "CREATED",
        "Debouncer",
        "GONE",
        "MODIFIED",
        "StreamSlots",
        "Subscriber",
    ),
    "serverio.concurrency.flight": ("FlightStats", "SingleFlightCache"),
    "serverio.config": (
        "ACCESS_LOG_FORMATS",
        "Config",
        "ConnectionPolicy",
        "ContentPolicy",
        "ETAG_MODES",
        "FIELD_GROUP",
        "FilesPolicy",
        "H2Policy",
        "LOG_LEVELS",
        "ListenPolicy",
        "LogPolicy",
        "ON_DUPLICATE",
        "POLICIES",
        "Policy",
        "PoolPolicy",
        "ProxyPolicy",
        "ProxyRoute",
        "SitePolicy",
        "TlsPolicy",
        "UploadPolicy",
        "WatchPolicy",
        "field_path",
        "listener_http2",
        "normal_route",
        "parse_host_port",
        "parse_listen",
        "parse_networks",
        "parse_proxy_spec",
        "parse_upstream",
        "proxy_route",
    ),
    "serverio.dav": None,
    "serverio.dav.answers": (
        "ALLOW_DAV",
        "XML_TYPE",
        "condition_plan",
        "multistatus_plan",
        "options_plan",
        "status_plan",
        "stream_plan",
    ),
    "serverio.dav.common": (
        "DavBase",
        "field",
        "read_access",
        "read_body",
        "refused_plan",
        "rel",
        "write_access",
    ),
    "serverio.dav.guard": (
        "Done",
        "LockGuard",
        "NO_LOCKS",
        "NoLocks",
        "no_etag",
        "path_href",
    ),
    "serverio.dav.ifheader": (
        "Condition",
        "Depth",
        "Destination",
        "IfField",
        "IfList",
        "MAX_IF_CONDITIONS",
        "MAX_IF_FIELD",
        "MAX_TIMEOUT",
        "ResourceState",
        "parse_depth",
        "parse_destination",
        "parse_if",
        "parse_overwrite",
        "parse_timeout",
    ),
    "serverio.dav.lockguard": ("TableLocks", "guard_path", "lock_path", "new_token"),
    "serverio.dav.lockplans": (
        "XML_TYPE",
        "activelock",
        "conflict_plan",
        "denied_plan",
        "full_plan",
        "lock_plan",
        "lockdiscovery",
        "locked_plan",
        "lockroot_href",
        "parse_lock_token",
        "precondition_failed_plan",
        "supportedlock",
        "unlock_mismatch_plan",
        "unlocked_plan",
    ),
    "serverio.dav.locks": (
        "DEFAULT_TIMEOUT",
        "Denied",
        "Lock",
        "LockPath",
        "LockRefusal",
        "LockRefused",
        "LockTable",
        "check_request",
        "choose_timeout",
    ),
    "serverio.dav.methods": (
        "copy_move",
        "create_empty",
        "delete",
    ),
    "serverio.dav.props": (
        "LIVE",
        "Locks",
        "apply_patch",
        "dump_dead",
        "live_props",
        "load_dead",
        "propfind_response",
    ),
    "serverio.dav.service": (
        "DAV_METHODS",
        "DavService",
        "PREFIX_METHODS",
    ),
    "serverio.dav.xml": (
        "DAV",
        "Element",
        "LockInfo",
        "LockScope",
        "MAX_XML_BYTES",
        "MAX_XML_DEPTH",
        "MAX_XML_NODES",
        "MULTISTATUS_HEAD",
        "MULTISTATUS_TAIL",
        "PropRemove",
        "PropSet",
        "PropStat",
        "Propfind",
        "PropfindKind",
        "QName",
        "Response",
        "XML_NS",
        "href_of",
        "multistatus",
        "multistatus_chunks",
        "parse_lockinfo",
        "parse_propfind",
        "parse_proppatch",
        "parse_xml",
        "response_xml",
        "serialize",
    ),
    "serverio.errors": ("ConfigError", "HTTPError", "reason_phrase"),
    "serverio.fs": None,
    "serverio.fs.body": ("Body", "NO_BODY", "StreamBody", "close_fd"),
    "serverio.fs.davtree": (
        "DirScan",
        "Found",
        "PROPS_DIR",
        "TreeJob",
        "TreeTooLarge",
        "copy_tree",
        "count_tree",
        "lookup",
        "make_collection",
        "move_tree",
        "props_name",
        "read_props",
        "remove_tree",
        "root_place",
        "write_props",
    ),
    "serverio.fs.filecache": (
        "FileCache",
        "FileCacheStats",
        "HashStore",
        "RACY_SECONDS",
        "SHARED_MTIME_FILES",
        "UNTIMED",
        "identity",
        "window_state",
    ),
    "serverio.fs.jobs": (
        "Listing",
        "OwnedFd",
        "Scan",
        "compress_file",
        "hash_bytes",
        "hash_file",
        "hash_for_etag",
        "render_listing",
        "scan_directory",
        "scan_listing",
    ),
    "serverio.fs.mounts": ("MountedRoot", "match_mount", "mount_table", "open_root"),
    "serverio.fs.opener": ("ContainedRoot", "MAX_SYMLINKS", "RootOpener", "STRATEGIES"),
    "serverio.fs.prepare": ("resolve", "stat_facts"),
    "serverio.fs.readme": ("Readme", "read_readme"),
    "serverio.fs.reads": ("HAS_PREAD", "pread", "read_all"),
    "serverio.fs.watch": (
        "InotifyTree",
        "inotify_available",
        "parse_events",
        "poll_diff",
        "poll_scan",
    ),
    "serverio.fs.winpath": ("may_be_short_name", "windows_name_problem"),
    "serverio.fs.winstat": ("fstat", "stat"),
    "serverio.fs.writer": (
        "NO_REPLACE",
        "Placement",
        "Refusal",
        "SYS",
        "WriteJob",
        "WriteRefused",
        "current_bytes",
        "delete_file",
        "make_directory",
        "open_target",
        "sweep",
        "writable_current",
    ),
    "serverio.http": None,
    "serverio.http.access": ("ALLOWED", "Access", "Verdict", "access_plan"),
    "serverio.http.codecs": ("CODECS", "compress_bytes"),
    "serverio.http.core": (
        "CONDITIONAL_FIELDS",
        "ETAG_MODES",
        "EtagPolicy",
        "ExtraFields",
        "FileFacts",
        "FileSpan",
        "NOSNIFF_FIELD",
        "NO_EXTRA",
        "Plan",
        "RequestFacts",
        "UNSATISFIABLE",
        "VARY_ACCEPT",
        "VARY_ACCEPT_ENCODING",
        "coded_etag",
        "common_fields",
        "conditional_plan",
        "content_digest",
        "content_hasher",
        "decide_directory",
        "decide_file",
        "decide_generated",
        "depends_on_method_only",
        "error_plan",
        "evaluate_preconditions",
        "make_etag",
        "mtime_is_synthetic",
        "parse_etag_list",
        "parse_range",
        "precondition_plan",
        "route",
        "sent_mtime",
        "spa_fallback_applies",
        "wants_content_hash",
        "webdav_at",
        "without_conditions",
    ),
    "serverio.http.dates": (
        "MAX_HTTP_SECONDS",
        "MIN_HTTP_SECONDS",
        "format_http_date",
        "http_seconds",
        "parse_http_date",
    ),
    "serverio.http.decide": (
        "FLY",
        "cache_candidate",
        "decide",
        "identity_fallback",
        "needs_compressed",
        "serve_cached",
    ),
    "serverio.http.disposition": ("ascii_fallback", "content_disposition", "download_matches"),
    "serverio.http.errorpage": ("ERROR_CSP", "error_html", "negotiated_error", "text_body"),
    "serverio.http.listing": (
        "Entry",
        "FILTER_MAX",
        "LISTING_CSP",
        "LISTING_UPLOAD_CSP",
        "ListingQuery",
        "SORT_KEYS",
        "entries_digest",
        "filter_entries",
        "json_text",
        "listing_etag",
        "parse_listing_query",
        "render_html",
        "render_json",
        "shown_name",
        "sort_entries",
    ),
    "serverio.http.mime": ("DEFAULT_TYPE", "guess_type", "is_compressible"),
    "serverio.http.negotiate": (
        "AcceptEncoding",
        "CODING_RANK",
        "COMPRESS_MIN_SIZE",
        "DIGEST_ALGORITHMS",
        "SIDECAR_SUFFIX",
        "parse_accept_encoding",
        "parse_query",
        "prefers_html",
        "prefers_json",
        "repr_digest_field",
        "select_coding",
        "want_digest",
        "wanted_codings",
    ),
    "serverio.http.plans": (
        "HeaderOps",
        "NO_OPS",
        "apply_headers",
        "no_content_plan",
        "page_plan",
        "redirect_plan",
    ),
    "serverio.http.readme": (
        "MARKDOWN",
        "README_MAX",
        "README_NAMES",
        "checked_url",
        "render_readme",
        "with_readme",
    ),
    "serverio.http.reasons": ("REASON_STATUS", "reason_status"),
    "serverio.http.select": (
        "Headers",
        "choice_depends_on",
        "choose_coding",
        "digest_algorithm",
        "digest_applies",
        "file_headers",
        "negotiates",
        "on_the_fly",
        "sidecars_wanted",
    ),
    "serverio.http.target": (
        "MAX_SEGMENTS",
        "Target",
        "WRITE_TEMP_PREFIX",
        "is_write_temp",
        "parse_target",
        "quote_query",
        "quote_segment",
    ),
    "serverio.live": None,
    "serverio.live.inject": ("PageScript",),
    "serverio.live.protocol": (
        "accepts_html",
        "csp_blocks_scripts",
        "decide_injected",
        "error_page",
        "header",
        "inject_html",
        "injected_coding",
        "injected_etag",
        "injected_precondition",
        "is_html",
        "reserved_plan",
        "watch_csp",
    ),
    "serverio.live.script": (
        "LiveAssets",
        "SSE_KEEPALIVE",
        "SSE_PREAMBLE",
        "event_path",
        "live_assets",
        "sse_css",
        "sse_reload",
    ),
    "serverio.live.service": ("LiveReload",),
    "serverio.model": (
        "Body",
        "BodyCut",
        "CACHED",
        "CHOICES_KEPT",
        "CacheCandidate",
        "CacheEntries",
        "CachedFile",
        "ChunkSource",
        "DIRECTORY",
        "ERROR",
        "FILE",
        "Identity",
        "LISTING",
        "NO_BODY",
        "Prepared",
        "Reason",
        "Rep",
        "Resolution",
        "Sidecar",
        "StreamBody",
        "UNAVAILABLE",
        "close_fd",
        "errno_reason",
    ),
    "serverio.net": None,
    "serverio.net.accept": ("Acceptor", "raw_acceptor"),
    "serverio.net.activation": ("SD_LISTEN_FDS_START", "listeners_from_fds", "systemd_fds"),
    "serverio.net.admin": (
        "AdminHandler",
        "AdminPostHandler",
        "PROMETHEUS_TYPE",
        "open_admin_listener",
        "serve_admin",
        "text",
    ),
    "serverio.net.admission": ("Admission", "REJECT", "reject_at_once"),
    "serverio.net.connection": ("ConnectionTask", "H2_PREFACE"),
    "serverio.net.emit": (
        "Abort",
        "BUFFER_CHUNK",
        "Emitter",
        "SENDFILE_CHUNK",
        "SEND_PIECE",
        "SOCKET_FD_IO",
    ),
    "serverio.net.env": ("ConnectionEnv", "SwitchFactory", "Switched"),
    "serverio.net.h1body": ("CONTINUE", "H1Body", "RECV_SIZE"),
    "serverio.net.h1head": ("Head", "HeadReader", "RECV_SIZE", "request_facts"),
    "serverio.net.h1tunnel": ("serve_tunnel",),
    "serverio.net.h1state": (
        "BUSY",
        "CLOSED",
        "DRAIN",
        "FIRST",
        "HANDSHAKE",
        "HEAD",
        "IDLE",
        "Lifetime",
        "Phase",
        "STREAM",
        "SWITCHED",
        "TRANSITIONS",
        "TUNNEL",
    ),
    "serverio.net.h2adapter": (
        "DirectFrames",
        "FRAME_CHUNK",
        "FRAME_HEAD",
        "Frames",
        "LengthUncheckedStream",
        "PublicFrames",
        "SUPPORTED",
        "ServerConnection",
        "StreamLengthConnection",
        "TESTED",
        "direct_ok",
        "frames_for",
        "h2_version",
        "pending_header_bytes",
        "server_connection",
    ),
    "serverio.net.h2answer": ("StreamAnswer", "run_deferred"),
    "serverio.net.h2body": ("DEFAULT_WINDOW", "H2Body", "StreamLengthConnection"),
    "serverio.net.h2conn": (
        "FRAME_CHUNK",
        "H2Connection",
        "OUT_BUDGET",
        "OUT_HIGH",
        "ROUND_QUANTUM",
    ),
    "serverio.net.h2events": ("EventStreams",),
    "serverio.net.h2phase": (
        "BROKEN",
        "CLOSED",
        "ConnPhase",
        "DRAINING",
        "FINISHING",
        "FLAGS",
        "OPEN",
        "TRANSITIONS",
        "check",
    ),
    "serverio.net.h2read": ("Budget", "FrameReader", "Sink", "WindowAllowance"),
    "serverio.net.h2state": (
        "ANSWERING",
        "CLOSED",
        "COMPLETE",
        "DONE",
        "EVENTS",
        "FAILED",
        "NEW",
        "RESET",
        "SENDING",
        "STOPPED",
        "Stream",
        "StreamState",
        "TRANSITIONS",
    ),
    "serverio.net.h2stream": ("send_stream",),
    "serverio.net.h2write": (
        "FRAME_CHUNK",
        "IDLE_KEEP",
        "OUT_BUDGET",
        "OUT_HIGH",
        "Pread",
        "Preadv",
        "ROUND_QUANTUM",
        "Writer",
        "response_fields",
    ),
    "serverio.net.lifecycle": ("Lifecycle",),
    "serverio.net.listen": (
        "Listeners",
        "bind_public",
        "listen_options",
        "listen_specs",
        "public_addresses",
    ),
    "serverio.net.order": ("ORDER_CHUNK", "ORDER_MIN_CONNECTIONS", "ServeOrder"),
    "serverio.net.outbuf": None,
    "serverio.net.reqbody": (
        "BodyError",
        "BodyMalformed",
        "BodyPolicy",
        "BodyState",
        "BodyTimeout",
        "BodyTooLarge",
        "ClientGone",
        "RequestBody",
        "body_policy",
    ),
    "serverio.net.server": ("Server", "bind_public", "public_addresses"),
    "serverio.net.services": ("Services",),
    "serverio.net.tls": ("TLS12_CIPHERS", "load_error", "make_ssl_context"),
    "serverio.observe": None,
    "serverio.observe.accesslog": ("AccessLog", "AccessRecord"),
    "serverio.observe.histogram": ("BUCKETS", "Histogram"),
    "serverio.observe.stats": (
        "ConnectionStats",
        "ContentStats",
        "FLAT",
        "H2Stats",
        "ProxyStats",
        "ResponseStats",
        "SiteStats",
        "Stats",
        "TimeoutStats",
        "WriteStats",
    ),
    "serverio.ops": None,
    "serverio.ops.check": ("CHECK_TIMEOUT", "check_url", "loopback_target"),
    "serverio.ops.cli": ("build_parser", "config_from_args", "main"),
    "serverio.ops.completions": (
        "Flag",
        "SHELLS",
        "SUBCOMMANDS",
        "Subcommand",
        "completion_script",
        "completions_main",
        "flags_of",
        "value_kind",
    ),
    "serverio.ops.cpus": ("available_cpus", "cgroup_cpu_limit"),
    "serverio.ops.devtls": (
        "CA_DAYS",
        "DevTls",
        "LEAF_DAYS",
        "PERMITTED_DNS",
        "PERMITTED_IPS",
        "RENEW_DAYS",
        "apply_dev_tls",
        "check_key_mode",
        "default_dir",
        "ensure_dev_tls",
        "local_names",
        "trust_instructions",
    ),
    "serverio.ops.fdlimit": ("FD_RESERVE", "fd_reserve", "fit_fd_limit", "per_connection"),
    "serverio.ops.lan": ("WILDCARDS", "interface_addresses", "network_urls"),
    "serverio.ops.manpage": ("manpage", "manpage_main", "roff_text"),
    "serverio.ops.metrics": (
        "BUCKETS",
        "Histogram",
        "caches_of",
        "counters_only",
        "family",
        "merge",
        "render",
        "snapshot",
    ),
    "serverio.ops.notify": ("notify",),
    "serverio.ops.options": (
        "DEFAULTS",
        "ENV_PREFIX",
        "GROUPS",
        "NOT_SETTABLE",
        "OPTIONS",
        "Option",
        "PORT_ENV",
        "TABLES",
        "Table",
        "Toggle",
        "add_option",
        "blame_env",
        "by_dest",
        "config_fields",
        "env_bool",
        "env_names",
        "env_option",
        "env_values",
        "port_from_env",
    ),
    "serverio.ops.qr": ("QUIET", "check_qr_available", "qr_matrix", "qr_text"),
    "serverio.ops.run": (
        "EXIT_ADDRESS_IN_USE",
        "EXIT_FAILURE",
        "EXIT_USAGE",
        "ExtraTask",
        "bind_exit_status",
        "browse",
        "browser_url",
        "counters_line",
        "draining_line",
        "in_flight",
        "make_admin_handler",
        "run_server",
        "summary_line",
        "url_host",
    ),
    "serverio.ops.tomlconfig": (
        "CLI_ONLY",
        "OPTION_TABLES",
        "TABLES",
        "dump",
        "load",
        "option_keys",
        "parse_with_config",
    ),
    "serverio.ops.workers": ("CRASH_LIMIT", "CRASH_WINDOW", "supervise", "worker_main"),
    "serverio.pipeline": None,
    "serverio.pipeline.content": ("ContentService", "OwnedFd"),
    "serverio.pipeline.handler": (
        "BodyStep",
        "Content",
        "Deferred",
        "Handler",
        "prepare",
        "watch_client",
    ),
    "serverio.pipeline.hooks": (
        "Admit",
        "EventSource",
        "Hooks",
        "ListingView",
        "NO_HEAD",
        "NO_HOOKS",
        "Proxy",
        "RawHead",
        "Router",
        "Transform",
        "Tunnel",
        "TunnelBody",
        "Upload",
        "WRITE_METHODS",
        "WriteContent",
        "WriteStep",
    ),
    "serverio.pipeline.request": (
        "Answer",
        "Deps",
        "ForwardedClient",
        "Wait",
        "Waiting",
        "access",
        "busy",
        "client_for",
        "complete",
        "complete_body",
        "complete_write",
        "failed",
        "finish",
        "record",
        "start",
    ),
    "serverio.proxy": ("ProxyService",),
    "serverio.proxy.client": (
        "Connect",
        "Pool",
        "RECV_SIZE",
        "UpstreamConn",
        "UpstreamError",
        "exchange",
        "only_cancelled",
        "open_upstream",
    ),
    "serverio.proxy.routes": (
        "HOP_BY_HOP",
        "Routes",
        "VIA",
        "forwarded_for",
        "mount_prefixes",
        "request_fields",
        "response_fields",
        "upgrade_token",
        "upstream_target",
    ),
    "serverio.proxy.service": ("Downstream", "ProxyService"),
    "serverio.proxy.tunnel": ("TunnelGauge", "UpstreamTunnel"),
    "serverio.site": None,
    "serverio.site.access": ("AccessTarget", "Kind", "rule_for", "served_target", "write_allowed"),
    "serverio.site.authlimit": (
        "Attempt",
        "AuthLimiter",
        "BACKOFF_BASE",
        "BACKOFF_CAP",
        "FAILURE_BUDGET",
        "FAILURE_WINDOW",
        "IN_FLIGHT",
        "MAX_ENTRIES",
        "USER_FORGET",
        "USER_FREE",
        "retry_after",
    ),
    "serverio.site.finish": ("ErrorPage", "Finisher", "PAGE_RECHECK", "read_error_pages"),
    "serverio.site.forwarded": (
        "IPAddress",
        "IPNetwork",
        "MAX_HOPS",
        "client_address",
        "normalize_address",
        "trusts",
    ),
    "serverio.site.gate": ("AUTH_QUEUE", "AUTH_WORKERS", "Gate", "client_key"),
    "serverio.site.passwords": (
        "BCRYPT_MAX",
        "check_hash",
        "cost_profile",
        "dummy_like",
        "hash_password",
        "verify",
        "verify_padded",
        "work_plan",
    ),
    "serverio.site.rules": (
        "AuthRule",
        "Cors",
        "FORBIDDEN_HEADERS",
        "HeaderRule",
        "Redirect",
        "Rewrite",
        "SiteRules",
        "WRITE_ACTIONS",
        "WritableRule",
        "access_paths",
        "canonical",
        "compile_glob",
        "compile_rules",
        "compile_writable",
        "cors_headers",
        "decide_route",
        "error_page_key",
        "header_ops",
        "map_header_values",
        "match_path",
        "merge_header_lines",
        "parse_basic",
        "parse_header_line",
        "preflight_fields",
        "redirect_for",
        "rewrite_for",
        "slash_redirect",
    ),
    "serverio.site.service": ("FAILURE_BUDGET", "FAILURE_WINDOW", "Site", "Ticket", "load_site"),
    "serverio.upload": None,
    "serverio.upload.decide": (
        "REFUSAL_STATUS",
        "created_plan",
        "cross_site",
        "deleted_plan",
        "errno_status",
        "form_answer",
        "has_preconditions",
        "is_create_only",
        "precondition_status",
        "replaced_plan",
    ),
    "serverio.upload.form": (
        "MAX_FIELD_BYTES",
        "MKDIR_FIELD",
        "WriteKit",
        "place_file",
        "post_form",
    ),
    "serverio.upload.service": ("CLEANUP_SECONDS", "CommitGate", "Uploads"),
    "serverio.wire": None,
    "serverio.wire.bodyframe": (
        "ChunkState",
        "ChunkedDecoder",
        "Framing",
        "FramingKind",
        "MAX_CHUNK_LINE",
        "MAX_TRAILERS",
        "request_framing",
    ),
    "serverio.wire.fasthead": ("FastRequest", "HeadParser", "MAX_FIELDS", "parse_head"),
    "serverio.wire.fields": (
        "EXTRA_FIELDS",
        "FACT_FIELDS",
        "Fields",
        "HOST_RE",
        "check_host",
        "scan_fields",
    ),
    "serverio.wire.h1": ("Canned", "SHARED_HEADS", "SHARED_HEADS_MAX", "head_bytes", "shared_head"),
    "serverio.wire.h2head": (
        "CONNECTION_SPECIFIC",
        "MalformedRequest",
        "RequestHead",
        "parse_request_head",
        "path_bytes_ok",
    ),
    "serverio.wire.hpackfast": ("CachingDecoder", "FieldEncoder", "encode_integer"),
    "serverio.writes": None,
    "serverio.writes.digest": (
        "ALGORITHMS",
        "DigestVerifier",
        "MAX_DIGEST_FIELD",
        "MAX_MEMBERS",
        "parse_digests",
    ),
    "serverio.writes.multipart": (
        "Done",
        "Event",
        "MAX_PARTS",
        "MAX_PART_HEADERS",
        "MAX_PART_HEADER_BYTES",
        "MultipartParser",
        "MultipartState",
        "PartData",
        "PartEnd",
        "PartStart",
        "boundary_of",
    ),
    "serverio.writes.names": (
        "MAX_NAME_BYTES",
        "MAX_RENAME_TRIES",
        "NameProblem",
        "OnDuplicate",
        "Picked",
        "UnsafeName",
        "check_name",
        "pick_name",
        "reduce_name",
    ),
}

# Importing this module runs the command line.
NOT_IMPORTED = {"serverio.__main__"}


def module_files() -> dict[str, Path]:
    """Dotted name -> source file of every module of the serverio package."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def static_all(path: Path) -> list[str] | None:
    """The module's ``__all__`` as written (a literal list or tuple of strings)."""
    found: list[str] | None = None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        assert isinstance(node, ast.Assign) and found is None, (
            f"{path.name}: __all__ must be assigned once, as a literal"
        )
        value = ast.literal_eval(node.value)
        assert isinstance(value, (list, tuple)), f"{path.name}: __all__ is not a list"
        assert all(isinstance(v, str) for v in value)
        found = list(value)
    return found


def row(module: str, names: list[str] | None) -> str:
    """The table row for ``module`` exporting ``names``."""
    if names is None:
        return f'    "{module}": None,'
    body = ", ".join(f'"{n}"' for n in sorted(names))
    return f'    "{module}": ({body}{"," if len(names) == 1 else ""}),'


def test_the_table_names_every_module_and_no_other() -> None:
    found = set(module_files())
    missing, stale = sorted(found - set(EXPORTS)), sorted(set(EXPORTS) - found)
    assert not missing and not stale, f"add rows for {missing}; remove rows for {stale}"


@pytest.mark.parametrize("module", sorted(EXPORTS))
def test_all_is_exactly_the_pinned_names(module: str) -> None:
    path = module_files().get(module)
    assert path is not None, f"{module} is in the table but not in the package"
    names = static_all(path)
    if names is not None:
        assert len(names) == len(set(names)), f"{module}: __all__ repeats a name"
    pinned = EXPORTS[module]
    got = None if names is None else sorted(names)
    want = None if pinned is None else sorted(pinned)
    assert got == want, f"{module}'s exports changed; the row is now:\n{row(module, names)}"


@pytest.mark.parametrize("module", sorted(m for m in EXPORTS if m not in NOT_IMPORTED))
def test_exported_names_exist_and_are_public(module: str) -> None:
    names = EXPORTS[module] or ()
    private = [n for n in names if n.startswith("_")]
    assert not private, f"{module} exports private names: {private}"
    mod = importlib.import_module(module)
    absent = [n for n in names if not hasattr(mod, n)]
    assert not absent, f"{module}.__all__ names what it does not define: {absent}"


def test_top_level_namespace_is_exactly_all() -> None:
    assert EXPORTS["serverio"] == TOP_LEVEL
    public = {
        name
        for name, value in vars(serverio).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(serverio.__all__) == set(TOP_LEVEL)
    assert isinstance(serverio.__version__, str)


def documented_names(text: str) -> set[str]:
    """The backquoted names of the "Public names" paragraph of architecture.md."""
    m = re.search(r"^Public names \(`serverio\.__all__`\):(.*?)(?:\n\n|\Z)", text, re.M | re.S)
    assert m is not None, "docs/architecture.md has no 'Public names (`serverio.__all__`):'"
    names = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", m[1]))
    return {n for n in names if not (n.startswith("__") and n.endswith("__"))}


def test_top_level_names_are_the_documented_set() -> None:
    assert documented_names(ARCHITECTURE.read_text(encoding="utf-8")) == set(serverio.__all__)


def test_a_changed_export_fails_with_the_row_to_paste(tmp_path: Path) -> None:
    # The table check itself: a module whose __all__ differs from its row.
    path = tmp_path / "m.py"
    path.write_text('__all__ = ["b", "a"]\n')
    assert static_all(path) == ["b", "a"]
    assert row("serverio.m", static_all(path)) == '    "serverio.m": ("a", "b"),'
    path.write_text("__all__ = ['a']\n__all__ += ['b']\n")
    with pytest.raises(AssertionError, match="assigned once"):
        static_all(path)
    text = "x\n\nPublic names (`serverio.__all__`): `A`,\n`b`; `__version__`.\n\n`z`"
    assert documented_names(text) == {"A", "b"}
