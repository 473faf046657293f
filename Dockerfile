# draquota admission webhook. Build: docker build -t draquota:0.1.0 .
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY quota ./quota
COPY webhook ./webhook
COPY certs ./certs
RUN python -m venv /opt/draquota \
 && /opt/draquota/bin/pip install --upgrade pip \
 && /opt/draquota/bin/pip install .

FROM python:3.11-slim
ENV PATH=/opt/draquota/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/draquota /opt/draquota
# Numeric, non-root user (runAsNonRoot can verify a numeric UID without /etc/passwd).
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["draquota"]
CMD ["serve", "--in-cluster", "--cert-dir", "/tls", "--config", "/etc/draquota/config.yaml", "--host", "0.0.0.0", "--port", "8443"]
