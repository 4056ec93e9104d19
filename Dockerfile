# serverio in a container: slim Python base, non-root, read-only root friendly.
#
#   docker build -t serverio .
#   docker run --read-only --tmpfs /tmp -p 8080:8080 -v "$PWD/site:/srv/www:ro" serverio
#
# Nothing in the image is written at run time except /tmp (the private Unix
# sockets of --workers): mount a tmpfs there with --read-only.  The site is
# a volume, or baked into an image built FROM this one (COPY site /srv/www).
# docs/deployment.md "Fleets" explains every value below.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

WORKDIR /build
COPY pyproject.toml README.md ./
COPY serverio ./serverio
RUN pip install --no-cache-dir '.[brotli,zstd]' \
    && rm -rf /build \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin serverio \
    && mkdir -p /srv/www

WORKDIR /srv/www
USER 10001:10001

# 8080: the site (plaintext; TLS usually ends at the load balancer).
# 9090: /healthz and /metrics (--admin-bind); publish it to the orchestrator only.
EXPOSE 8080 9090

# No curl in the image: serverio probes its own admin port (loopback only).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-m", "serverio", "--check", "http://127.0.0.1:9090/healthz"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m", "serverio"]
CMD ["-d", "/srv/www", "--listen", "0.0.0.0:8080", "--admin-bind", "0.0.0.0:9090", \
     "--workers", "auto", "--shutdown-delay", "5", "--shutdown-timeout", "10", \
     "--access-log", "json"]
