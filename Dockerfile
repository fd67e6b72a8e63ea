FROM python:3.11-slim

# git: the command fixer clones and pushes PR branches.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY storage ./storage
COPY migrations ./migrations
RUN pip install --no-cache-dir . && rm -rf /src

RUN useradd --create-home --uid 10001 convergebot && mkdir /data && chown convergebot /data
USER convergebot
WORKDIR /data
ENV CONVERGEBOT_DATABASE_URL=sqlite:////data/convergebot.db \
    CONVERGEBOT_SERVER_HOST=0.0.0.0
VOLUME ["/data"]
EXPOSE 8080

ENTRYPOINT ["convergebot"]
CMD ["serve"]
