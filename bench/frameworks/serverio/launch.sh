#!/bin/sh
# HttpArena's static profiles: /static/* from /data on :8080 (HTTP/1.1) and
# :8081 (HTTP/1.1 over TLS with the suite's certificate).  One process per
# CPU the container may use; no access log (the suite measures the server).
set -eu
exec python -m serverio -d /data \
    --listen 0.0.0.0:8080 \
    --listen-tls 0.0.0.0:8081 --certfile /certs/server.crt --keyfile /certs/server.key \
    --workers auto \
    --max-connections 16384 --max-requests 1000000 --keepalive-timeout 65 \
    --access-log off
