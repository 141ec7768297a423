# make check: what CI runs (.ci/run): gofmt, vet, staticcheck, tidy, promtool,
# then scripts/test.sh (the README's test command) on SQLite and PostgreSQL.
.PHONY: check test build quickstart bench

check:
	./.ci/run

test:
	scripts/test.sh

build:
	go build -o stet ./cmd/stet

quickstart: build
	./stet quickstart

bench:
	go run ./cmd/stetlab bench intake
	go run ./cmd/stetlab bench pipeline
