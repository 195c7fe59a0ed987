# One image for every service: `crawler <role>` with role frontier, fetcher, parser,
# dedup or api (see docker-compose.yml and deploy/helm/crawler). Settings come from
# CRAWLER_* environment variables only (`crawler settings` lists them).
# The render service (`crawler render`) needs a browser: target `render` is the same
# image plus Debian's chromium and the render extra (docker build --target render -t
# polite-crawler-render .; compose builds it for the profile render).

# --- build: install the project and its cluster extras into a virtual environment ---
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/crawler
WORKDIR /src
# The dependencies first, from pyproject.toml alone: a change to the sources then rebuilds
# only the layers below (seconds), not this one (minutes).
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['cluster']))" \
        > /tmp/requirements.txt \
    && /opt/crawler/bin/pip install -r /tmp/requirements.txt
COPY README.md ./
COPY common ./common
COPY frontier ./frontier
COPY fetcher ./fetcher
COPY parser ./parser
COPY dedup ./dedup
COPY render ./render
COPY crawler ./crawler
COPY simweb ./simweb
RUN /opt/crawler/bin/pip install ".[cluster,s3]" \
    && /opt/crawler/bin/crawler settings > /dev/null

# --- build-render: the same environment with the render extra (Playwright's client) --
FROM build AS build-render
RUN /opt/crawler/bin/pip install ".[cluster,s3,render]"

# --- runtime: the virtual environment only, run as an unprivileged user -------------
FROM python:3.11-slim AS runtime
LABEL org.opencontainers.image.title="polite-crawler" \
      org.opencontainers.image.description="A distributed, polite web crawler" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 crawler \
    && useradd --system --uid 10001 --gid crawler --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin crawler \
    && mkdir -p /data/warc \
    && chown -R 10001:10001 /data
COPY --from=build /opt/crawler /opt/crawler
ENV PATH=/opt/crawler/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CRAWLER_METRICS_HOST=0.0.0.0 \
    CRAWLER_BLOB_ROOT=/data/warc
WORKDIR /data
USER 10001:10001
EXPOSE 8080 9100
ENTRYPOINT ["crawler"]
CMD ["--help"]

# --- render: the runtime with Debian's chromium (the render service's browser) -------
FROM runtime AS render
USER 0
# the browser of the base image's Debian release, with its security updates; libatomic1
# for the Node.js driver of Playwright's client
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends chromium fonts-liberation libatomic1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build-render /opt/crawler /opt/crawler
# no user namespaces in a default container: Chromium runs without its own sandbox,
# inside the container's (unprivileged user, no capabilities)
ENV CRAWLER_RENDER_ENABLED=true \
    CRAWLER_RENDER_SANDBOX=false \
    HOME=/tmp
USER 10001:10001
CMD ["render"]

# --- the default target: every other service ------------------------------------------
FROM runtime
USER 10001:10001
ENTRYPOINT ["crawler"]
CMD ["--help"]
