# The fulfiller container image: one static binary (no cgo) on distroless
# static, running as the non-root user nonroot (uid 65532). The Kubernetes
# manifests in examples/deploy/kubernetes name it; build and push it with
#
#   docker build -t registry.example.com/fulfiller:v1 --build-arg VERSION=v1 .
#   docker push registry.example.com/fulfiller:v1
#
# cmd/fulfiller's TestContainerImage checks this recipe (and builds it
# where a Docker daemon answers); docs/operations.md "Container image".

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# What `fulfiller --version` prints; empty: the module version or "(devel)".
ARG VERSION=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fulfiller ./cmd/fulfiller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fulfiller /usr/local/bin/fulfiller
# The default --state (fulfiller.state) is relative: a directory the
# nonroot user owns. Mount a volume at /var/lib/fulfiller and set
# --state (FULFILLER_STATE) under it for pending work to outlive the pod.
WORKDIR /home/nonroot
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/fulfiller"]
CMD ["--help"]
