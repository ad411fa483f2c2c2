# The bot in a container: installed exactly as the README's Quick start does it, run as an unprivileged user,
# its config mounted at /config/config.yaml and its data on the /data volume (see README, "Running in a container").
FROM python:3.11-slim

RUN useradd --create-home --uid 10001 myao2 && mkdir /data /app && chown myao2 /data /app
WORKDIR /app
COPY --chown=myao2 pyproject.toml requirements.lock dev.py README.md ./
COPY --chown=myao2 src ./src
USER myao2
RUN python3 dev.py install

VOLUME ["/data"]
ENV MYAO2_CONFIG=/config/config.yaml
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/live', timeout=4)"]
ENTRYPOINT ["python3", "dev.py", "run"]
CMD ["run"]
