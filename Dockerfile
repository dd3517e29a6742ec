# chaosd daemon image. Built and run by docker-compose.yml; on its own:
#   docker build -t chaosd . && docker run --rm -p 127.0.0.1:8686:8686 -e CHAOSD_API__HOST=0.0.0.0 \
#       -e CHAOSD_API__TOKEN=$(openssl rand -hex 16) chaosd
# (the daemon refuses a non-loopback bind without a token; the image's default config binds 127.0.0.1).
FROM python:3.11.14-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install only what the package needs (not .git, caches or local data).
WORKDIR /tmp/chaosd-src
COPY pyproject.toml setup.py MANIFEST.in README.md LICENSE ./
COPY build_backend ./build_backend
COPY chaosd ./chaosd
# The slim image has no C compiler: the package is built as plain Python (a wheel built where there is one compiles
# the hot path, which mostly speeds up offline runs: `chaosd --version` says which build runs).
RUN CHAOSD_NO_EXTENSIONS=1 python -m pip install ".[redis]" && rm -rf /tmp/chaosd-src

# Unprivileged user. Relative paths in the config (storage chaosd-data/chaosd.db, the report, scenarios/)
# resolve against the working directory, /var/lib/chaosd; chaosd-data is the volume to keep.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/chaosd --shell /usr/sbin/nologin chaosd \
    && mkdir -p /var/lib/chaosd/chaosd-data /etc/chaosd \
    && chown -R chaosd:chaosd /var/lib/chaosd
COPY config/chaosd.toml /etc/chaosd/chaosd.toml

WORKDIR /var/lib/chaosd
USER chaosd:chaosd
VOLUME ["/var/lib/chaosd/chaosd-data"]
EXPOSE 8686

# No curl in the slim image: probe /healthz with Python (a non-2xx answer or no answer raises → exit 1).
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8686/healthz', timeout=2)"]

# Exec form: chaosd is PID 1 and receives SIGTERM itself (it reverts faults and writes its report).
CMD ["chaosd", "--config", "/etc/chaosd/chaosd.toml"]
