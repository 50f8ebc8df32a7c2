# Remediator controller image. Build from the repository root:
#   docker build -t remediator:dev .
# The binary is static (CGO off) and runs as a non-root user on a distroless base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY policies/ policies/
COPY remediations/ remediations/
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/remediator ./cmd/remediator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/remediator /usr/local/bin/remediator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/remediator"]
CMD ["controller", "--leader-elect"]
