# make check: what CI runs (.ci/run): gofmt check, go vet, tests with -race.
.PHONY: check test build quickstart bench

check:
	./.ci/run

test:
	go test -race ./...

build:
	go build -o stet ./cmd/stet

quickstart:
	go run ./cmd/stet quickstart

bench:
	go run ./cmd/stet bench intake
	go run ./cmd/stet bench pipeline
