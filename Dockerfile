# syntax=docker/dockerfile:1
# adstap's image: the static binary of `make build` on distroless, as the
# nonroot user. Built by `make image`, which passes VERSION and COMMIT.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=
# The same build as the Makefile's `build` target (deploy/image_test.go
# checks that the two agree).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
    -o /out/adstap ./cmd/adstap

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/adstap /adstap
USER 65532:65532
# 15100: xDS listener (--listen); 15101: admin (--admin).
EXPOSE 15100 15101
ENTRYPOINT ["/adstap"]
CMD ["run"]
