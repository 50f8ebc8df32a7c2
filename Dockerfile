# Remediator controller image. Build from the repository root with `make image`, or:
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t remediator:dev .
#
# The binaries are static (CGO off, -trimpath) and run as the distroless "nonroot"
# user (65532) on a base with no shell and no package manager. cmd/remediator's
# dockerfile_test.go runs this file's build line and checks the result.
#
# Scope: one image, two binaries. /remediator-controller, the entrypoint, is the
# controller manager, a binary of its own so that its process carries none of the
# CLI's packages. /remediator is the CLI: the read-only `scan` and `plan`, and `sync`,
# which fetches with go-git (pure Go), so it needs no git binary; the chart's
# sync.enabled runs `/remediator sync` from this image.

FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
# Dependencies first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
# The Go packages the binary is built from, and nothing else (no bin/, no test data).
COPY api/ api/
COPY charts/ charts/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
COPY policies/ policies/
COPY remediations/ remediations/
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/remediator ./cmd/remediator-controller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/remediator-controller /remediator-controller
COPY --from=build /out/remediator /remediator
USER 65532:65532
ENTRYPOINT ["/remediator-controller"]
