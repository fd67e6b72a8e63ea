# The base image. Pin it by digest for a build that is the same every time:
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest> .
# `make image-digests` prints the current digests (docs/operations.md, "Image and compose").
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

# git: the command fixer clones and pushes PR branches. bubblewrap: its agent's sandbox
# (docs/architecture.md, "The agent's sandbox"). Both come unpinned from the base image's Debian
# release, whose security updates a pin would refuse.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends git bubblewrap \
 && rm -rf /var/lib/apt/lists/*

# The dependencies first, from the lock file with every hash checked: a layer that changes only
# when the lock does, so a change to the source reinstalls nothing but the project.
COPY requirements/lock.txt /tmp/lock.txt
RUN pip install --no-cache-dir --require-hashes -r /tmp/lock.txt && rm /tmp/lock.txt

WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY storage ./storage
COPY migrations ./migrations
COPY simulator ./simulator
COPY sharedio ./sharedio
RUN pip install --no-cache-dir --no-deps . && rm -rf /src

RUN useradd --create-home --uid 10001 convergebot && mkdir /data && chown convergebot /data
# Numeric, so a runtime can check it is not root without reading the image's passwd.
USER 10001
WORKDIR /data
# The source revision /metrics reports (convergebot_build): docker build --build-arg REVISION=$(git rev-parse HEAD)
ARG REVISION=unknown
# The database is the default, ./convergebot.db in the working directory, /data: the URL is not
# set here, since a `database.url_file` (compose.yaml) and a `database.url` both set are refused.
ENV CONVERGEBOT_SERVER_HOST=0.0.0.0 \
    CONVERGEBOT_REVISION=$REVISION
VOLUME ["/data"]
EXPOSE 8080

# /livez answers while the process serves; readiness (the database, GitHub) is /readyz's.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/livez', timeout=3)"]

ENTRYPOINT ["convergebot"]
CMD ["serve"]
