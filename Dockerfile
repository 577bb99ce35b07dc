# Image of group-metrics-server: a static binary on a distroless base that
# runs as a non-root user and needs no writable file system.
FROM golang:1.27.3 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY pkg ./pkg
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/group-metrics-server/group-metrics-server/cmd/group-metrics-server/app.Version=${VERSION}" \
      -o /out/group-metrics-server ./cmd/group-metrics-server

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/group-metrics-server /group-metrics-server
USER 65532:65532
ENTRYPOINT ["/group-metrics-server"]
