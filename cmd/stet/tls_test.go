package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The real binary with tls: and metrics_listen: serves the API over HTTPS
// with HSTS (a certificate generated here), refuses plain HTTP on that
// port, and serves /metrics only on the metrics listener: the public one
// answers 404 for it.
func TestServeTLSAndMetricsListen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, pool := writeTestCertificate(t, dir)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeRulesConfig(t, dir, configParts{})
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	extra := fmt.Sprintf("tls: {cert_file: %q, key_file: %q}\nmetrics_listen: %s\n", certFile, keyFile, metricsAddr)
	if err := os.WriteFile(cfg, append(b, extra...), 0o600); err != nil {
		t.Fatal(err)
	}

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(stetBin, "serve", "--config", cfg, "--listen", addr)
	cmd.Dir = dir
	cmd.Env = childEnv(nil)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("stet serve output:\n%s", logs.String())
		}
	})

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var ready *http.Response
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ready, err = client.Get("https://" + addr + "/readyz"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("GET https://%s/readyz: %v", addr, err)
	}
	ready.Body.Close()
	if ready.StatusCode != http.StatusOK {
		t.Fatalf("GET /readyz over TLS = %d, want 200", ready.StatusCode)
	}
	if got := ready.Header.Get("Strict-Transport-Security"); !strings.Contains(got, "max-age=") {
		t.Errorf("Strict-Transport-Security = %q, want max-age set", got)
	}
	if ready.TLS == nil {
		t.Error("the answer came without TLS")
	}

	// Plain HTTP on the TLS port is not served.
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP on the TLS listener = 200, want a refusal")
		}
	}

	// /metrics is off the public listener and on its own.
	pub, err := client.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	pub.Body.Close()
	if pub.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics on the public listener = %d, want 404", pub.StatusCode)
	}
	m, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics on metrics_listen: %v", err)
	}
	body, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if m.StatusCode != http.StatusOK || !strings.Contains(string(body), "stet_") {
		t.Errorf("GET /metrics on metrics_listen = %d with %d bytes, want 200 with stet_ metrics", m.StatusCode, len(body))
	}
}

// writeTestCertificate writes a self-signed certificate for 127.0.0.1 and
// its key under dir, and returns their paths and a pool that trusts it.
func writeTestCertificate(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "stet test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
