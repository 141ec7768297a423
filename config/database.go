package config

import (
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// postgresURLProblems returns what is wrong with a PostgreSQL URL, read as
// the driver (pgx, like libpq) reads it rather than as net/url does: every
// host pgx would try, the URL's host part, a ?host= list and fallbacks
// alike, must be loopback, a Unix socket, or reached over TLS that checks
// the server's certificate (sslmode=verify-full or verify-ca); and no key
// may be given twice, since pgx reads the last one and a reader of the URL
// the first (docs/design.md §8). The reasons never quote the URL or a
// part of it: it may hold a password.
func postgresURLProblems(db string) []string {
	var out []string
	for _, k := range repeatedKeys(db) {
		also := ""
		switch k {
		case "sslmode":
			also = " (ssl=… is another spelling of sslmode)"
		case "host", "port":
			also = " (the host part and ?" + k + "= both set it)"
		case "database":
			also = " (the path and ?dbname= both set it)"
		case "user", "password":
			also = " (the user info and ?" + k + "= both set it)"
		default:
			if strings.Trim(k, "abcdefghijklmnopqrstuvwxyz_") != "" {
				k = "a parameter" // not a keyword: it may be anything, even a secret
			}
		}
		out = append(out, fmt.Sprintf("the URL sets %s more than once%s: the driver reads the last, so set it once", k, also))
	}
	// ParseConfig reads the PG* environment variables and a service file as
	// the connection will; it dials nothing. Its error may quote the URL.
	pc, err := pgconn.ParseConfig(db)
	if err != nil {
		return append(out, "the PostgreSQL driver does not accept this URL (check its query parameters and the sslrootcert, sslcert and sslkey files it names)")
	}
	hosts := []*pgconn.FallbackConfig{{Host: pc.Host, Port: pc.Port, TLSConfig: pc.TLSConfig}}
	hosts = append(hosts, pc.Fallbacks...)
	bad, worst := map[string]bool{}, ""
	for _, h := range hosts {
		if network, _ := pgconn.NetworkAddress(h.Host, h.Port); network == "unix" || isLoopback(h.Host) {
			continue
		}
		if w := tlsWeakness(h.TLSConfig); w != "" {
			bad[h.Host] = true
			if worst == "" || w == withoutTLS {
				worst = w
			}
		}
	}
	if len(bad) > 0 {
		which := "a host"
		if n := distinctHosts(hosts); n > 1 {
			which = fmt.Sprintf("%d of its %d hosts", len(bad), n)
		}
		out = append(out, fmt.Sprintf("a PostgreSQL server off loopback needs sslmode=verify-full or sslmode=verify-ca in the URL: as the driver reads it, %s would be reached %s", which, worst))
	}
	return out
}

const withoutTLS = "without TLS"

// tlsWeakness says how a connection with tc falls short of a checked
// certificate, or "" when it does not. pgx leaves InsecureSkipVerify off
// for verify-full and sets it with its own chain check for verify-ca.
func tlsWeakness(tc *tls.Config) string {
	switch {
	case tc == nil:
		return withoutTLS
	case tc.InsecureSkipVerify && tc.VerifyPeerCertificate == nil:
		return "without checking its certificate"
	}
	return ""
}

func distinctHosts(hosts []*pgconn.FallbackConfig) int {
	names := map[string]bool{}
	for _, h := range hosts {
		names[h.Host] = true
	}
	return len(names)
}

// repeatedKeys returns the keys a postgres:// URL gives more than once, in
// the order of their second occurrence, splitting it as pgx's URL parser
// does (pgconn/parse_url.go, after libpq's): the user info ends at the
// first '@' before any '/'; a host part, ports after ':', hosts separated
// by ','; the path is the database; then &-separated key=value pairs. A
// key the host part, the path or the user info already set counts as
// given again as a parameter, and ssl is sslmode's other spelling. What
// pgx would refuse to parse is left to pgconn.ParseConfig.
func repeatedKeys(db string) []string {
	p, ok := strings.CutPrefix(db, "postgresql://")
	if !ok {
		p, _ = strings.CutPrefix(db, "postgres://")
	}
	count := map[string]int{}
	var repeated []string
	add := func(k string) {
		if count[k]++; count[k] == 2 && k != "" {
			repeated = append(repeated, k)
		}
	}
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		user, password, hasPassword := strings.Cut(p[:i], ":")
		if user != "" {
			add("user")
		}
		if hasPassword && password != "" {
			add("password")
		}
		p = p[i+1:]
	}
	var host, port bool
	for {
		if strings.HasPrefix(p, "[") {
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return repeated
			}
			host, p = true, p[end+1:]
		} else {
			i := strings.IndexAny(p, ":/?,")
			if i < 0 {
				i = len(p)
			}
			host, p = host || i > 0, p[i:]
		}
		if strings.HasPrefix(p, ":") {
			i := strings.IndexAny(p[1:], "/?,")
			if i < 0 {
				i = len(p) - 1
			}
			port, p = true, p[1+i:]
		}
		if !strings.HasPrefix(p, ",") {
			break
		}
		// postgres://h1,h2 stores a host list and an (empty) port list.
		host, port, p = true, true, p[1:]
	}
	if host {
		add("host")
	}
	if port {
		add("port")
	}
	if rest, ok := strings.CutPrefix(p, "/"); ok {
		dbname, query, hasQuery := strings.Cut(rest, "?")
		if dbname != "" {
			add("database")
		}
		if !hasQuery {
			return repeated
		}
		p = "?" + query
	}
	query, ok := strings.CutPrefix(p, "?")
	if !ok {
		return repeated
	}
	for pair := range strings.SplitSeq(query, "&") {
		k, _, _ := strings.Cut(pair, "=")
		k = strings.Trim(percentDecode(k), " ")
		switch k {
		case "dbname":
			k = "database"
		case "ssl":
			k = "sslmode"
		}
		add(k)
	}
	return repeated
}

// percentDecode decodes %XX escapes; a malformed one stays as it is (pgx
// refuses the URL, which ParseConfig reports).
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if hi, ok := unhex(s[i+1]); ok {
				if lo, ok := unhex(s[i+2]); ok {
					b.WriteByte(hi<<4 | lo)
					i += 2
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
