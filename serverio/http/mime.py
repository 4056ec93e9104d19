"""Media types shipped with the package.

We do not read the host's ``/etc/mime.types`` (as :mod:`mimetypes` does):
the answer for ``.js`` must not depend on which distribution serverio runs on.
Text types carry ``; charset=utf-8``.  Unknown extensions are
``application/octet-stream`` (RFC 9110 §8.3: a sender that does not know the
type should not guess).
"""

from __future__ import annotations

__all__ = ["DEFAULT_TYPE", "guess_type", "is_compressible"]

DEFAULT_TYPE = "application/octet-stream"

_TEXT = {
    "html": "text/html",
    "htm": "text/html",
    "css": "text/css",
    "js": "text/javascript",  # RFC 9239
    "mjs": "text/javascript",
    "cjs": "text/javascript",
    "txt": "text/plain",
    "text": "text/plain",
    "log": "text/plain",
    "md": "text/markdown",
    "markdown": "text/markdown",
    "csv": "text/csv",
    "tsv": "text/tab-separated-values",
    "ics": "text/calendar",
    "vtt": "text/vtt",
    "xml": "text/xml",
    "json": "application/json",
    "map": "application/json",
    "jsonld": "application/ld+json",
    "webmanifest": "application/manifest+json",
    "geojson": "application/geo+json",
    "svg": "image/svg+xml",
    "xhtml": "application/xhtml+xml",
    "rss": "application/rss+xml",
    "atom": "application/atom+xml",
    "yaml": "application/yaml",
    "yml": "application/yaml",
    "toml": "application/toml",
    "py": "text/x-python",
    "sh": "text/x-shellscript",
    "c": "text/x-c",
    "h": "text/x-c",
    "rst": "text/x-rst",
}

_BINARY = {
    "wasm": "application/wasm",
    "webp": "image/webp",
    "avif": "image/avif",
    "png": "image/png",
    "apng": "image/apng",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "ico": "image/vnd.microsoft.icon",
    "bmp": "image/bmp",
    "tif": "image/tiff",
    "tiff": "image/tiff",
    "jxl": "image/jxl",
    "heic": "image/heic",
    "woff": "font/woff",
    "woff2": "font/woff2",
    "ttf": "font/ttf",
    "otf": "font/otf",
    "eot": "application/vnd.ms-fontobject",
    "pdf": "application/pdf",
    "mp4": "video/mp4",
    "m4v": "video/mp4",
    "webm": "video/webm",
    "ogv": "video/ogg",
    "mov": "video/quicktime",
    "mkv": "video/x-matroska",
    "avi": "video/x-msvideo",
    "mp3": "audio/mpeg",
    "m4a": "audio/mp4",
    "aac": "audio/aac",
    "ogg": "audio/ogg",
    "oga": "audio/ogg",
    "opus": "audio/ogg",
    "wav": "audio/wav",
    "flac": "audio/flac",
    "weba": "audio/webm",
    "zip": "application/zip",
    "gz": "application/gzip",
    "tgz": "application/gzip",
    "bz2": "application/x-bzip2",
    "xz": "application/x-xz",
    "zst": "application/zstd",
    "br": "application/octet-stream",
    "tar": "application/x-tar",
    "7z": "application/x-7z-compressed",
    "rar": "application/vnd.rar",
    "jar": "application/java-archive",
    "epub": "application/epub+zip",
    "doc": "application/msword",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xls": "application/vnd.ms-excel",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "ppt": "application/vnd.ms-powerpoint",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "odt": "application/vnd.oasis.opendocument.text",
    "ods": "application/vnd.oasis.opendocument.spreadsheet",
    "rtf": "application/rtf",
    "bin": "application/octet-stream",
    "exe": "application/octet-stream",
    "dmg": "application/octet-stream",
    "iso": "application/octet-stream",
    "deb": "application/vnd.debian.binary-package",
    "rpm": "application/x-rpm",
    "whl": "application/zip",
}

# Types worth compressing on the fly (the content issue uses this).
_COMPRESSIBLE_EXTRA = frozenset(
    {
        "application/json",
        "application/ld+json",
        "application/manifest+json",
        "application/geo+json",
        "application/xhtml+xml",
        "application/rss+xml",
        "application/atom+xml",
        "application/yaml",
        "application/toml",
        "application/wasm",
        "image/svg+xml",
        "image/vnd.microsoft.icon",
        "image/bmp",
        "font/ttf",
        "font/otf",
        "application/vnd.ms-fontobject",
        "application/rtf",
    }
)

_TABLE: dict[str, str] = {}
for _ext, _type in _TEXT.items():
    textual = _type.startswith("text/") or _type.endswith(("+json", "+xml", "/json", "/yaml"))
    _TABLE[_ext] = f"{_type}; charset=utf-8" if textual else _type
for _ext, _type in _BINARY.items():
    _TABLE[_ext] = _type


def guess_type(name: str) -> str:
    """The Content-Type for a file name, by its last extension (case-insensitive)."""
    dot = name.rfind(".")
    if dot <= 0:  # no extension, or a dotfile such as ".bashrc"
        return DEFAULT_TYPE
    return _TABLE.get(name[dot + 1 :].lower(), DEFAULT_TYPE)


def is_compressible(content_type: str) -> bool:
    base = content_type.split(";", 1)[0].strip()
    return base.startswith("text/") or base in _COMPRESSIBLE_EXTRA
