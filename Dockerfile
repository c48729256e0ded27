# WitCert on Debian 12: build with the project's own set-up script, fetch the default model,
# serve it. CUDA kernels are built when the image has nvcc (use an NVIDIA CUDA base image and
# pass --build-arg BASE=... to get them); this default image serves on the CPU.
#   docker build -t witcert .
#   docker run --rm -p 8000:8000 -p 50051:50051 witcert
ARG BASE=debian:12
FROM ${BASE} AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      ca-certificates git python3 python3-pip sudo && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN ./scripts/setup.sh && ./scripts/fetch_model.sh

FROM ${BASE}
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libspdlog1.10 libcpp-httplib0.11 \
      libpcre2-8-0 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/server/witcert /usr/local/bin/witcert
COPY --from=build /src/models /opt/witcert/models
COPY config /opt/witcert/config
EXPOSE 8000 50051
ENTRYPOINT ["/usr/local/bin/witcert", "serve", "--model", "/opt/witcert/models/SmolLM2-135M-Instruct.Q4_1.gguf", "--host", "0.0.0.0", "--grpc-host", "0.0.0.0"]
