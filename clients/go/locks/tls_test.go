package locks

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	file   string // its certificate, PEM
	pool   *x509.CertPool
	dir    string
	serial int64
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, pool: x509.NewCertPool(), dir: t.TempDir(), serial: 1}
	ca.pool.AddCert(cert)
	ca.file = writePEM(t, filepath.Join(ca.dir, "ca.pem"), "CERTIFICATE", der)
	return ca
}

// leaf makes a certificate for 127.0.0.1 and localhost signed by ca, for
// a server or (client) a client, and answers its PEM files and the pair.
func (ca *testCA) leaf(t *testing.T, name string, client bool) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writePEM(t, filepath.Join(ca.dir, name+".pem"), "CERTIFICATE", der)
	keyFile = writePEM(t, filepath.Join(ca.dir, name+".key"), "PRIVATE KEY", keyDER)
	pair, err = tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pair
}

func writePEM(t *testing.T, path, kind string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startTLSServer starts a holdline serve speaking TLS with a leaf of ca;
// clientCA, when given, is the CA its clients' certificates must come
// from.
func startTLSServer(t *testing.T, ca *testCA, clientCA *testCA) *server {
	t.Helper()
	cert, key, _ := ca.leaf(t, "server", false)
	args := []string{"--tls-cert", cert, "--tls-key", key}
	if clientCA != nil {
		args = append(args, "--tls-client-ca", clientCA.file)
	}
	return startServer(t, args...)
}

// holdOnce holds key for a moment through store and answers the fence.
func holdOnce(t *testing.T, store *Store, key string) uint64 {
	t.Helper()
	var fence uint64
	err := openLock(t, store, "tls").Hold(context.Background(), key, func(ctx context.Context, lease *Lease) error {
		fence = lease.Fence
		return lease.Err()
	}, Wait(10*time.Second))
	if err != nil || fence == 0 {
		t.Fatalf("hold %s: %v (fence %d)", key, err, fence)
	}
	return fence
}

// expectTLSFailed checks a connect's error against the table's tls_failed
// for hostport, with the reason matching reason.
func expectTLSFailed(t *testing.T, err error, hostport string, reason *regexp.Regexp) {
	t.Helper()
	expectText(t, texts(t), "tls_failed", map[string]string{"hostport": hostport}, ErrClosed, err)
	if m := regexp.MustCompile(`\((.*)\): closed$`).FindStringSubmatch(err.Error()); m == nil || !reason.MatchString(m[1]) {
		t.Errorf("the reason in %q does not match %s", err, reason)
	}
}

func TestHoldsOverTLS(t *testing.T) {
	ca := newCA(t, "holdline test CA")
	srv := startTLSServer(t, ca, nil)
	_, port, _ := net.SplitHostPort(srv.addr)
	trust := TLS(&tls.Config{RootCAs: ca.pool})

	first := holdOnce(t, connect(t, srv.addr, trust), "k")
	// By name (the certificate's DNS name), through a rediss:// URL.
	if next := holdOnce(t, connect(t, "rediss://localhost:"+port, trust), "k"); next <= first {
		t.Fatalf("fences %d then %d", first, next)
	}

	ctx := context.Background()
	// rediss:// alone trusts the system's CAs, which do not know this one.
	_, err := Connect(ctx, "rediss://127.0.0.1:"+port)
	expectTLSFailed(t, err, "127.0.0.1:"+port, regexp.MustCompile(`unknown authority`))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("%v does not wrap the verification's error", err)
	}
	// Plain text to a TLS port.
	_, err = Connect(ctx, srv.addr)
	expectTLSFailed(t, err, srv.addr, regexp.MustCompile(`^the server speaks TLS`))
}

// The network-safety clock is the same over TLS: a holder behind a frozen
// network path takes its lease for lost by its ttl.
func TestAHolderOverTLSBehindAFrozenNetworkLetsGo(t *testing.T) {
	ca := newCA(t, "holdline test CA")
	srv := startTLSServer(t, ca, nil)
	p := startProxy(t, srv.addr)
	const ttl = time.Second
	l := openLock(t, connect(t, p.addr, TLS(&tls.Config{RootCAs: ca.pool})), "tls-frozen", TTL(ttl))
	held := holdUntilLost(t, l, "k")
	p.freeze(t)
	frozenAt := time.Now()
	if took := within(t, "the loss", 10*time.Second, held.lost).at.Sub(frozenAt); took > ttl+500*time.Millisecond {
		t.Fatalf("let go %v after the freeze", took)
	}
	err := within(t, "the frozen hold", 10*time.Second, held.done)
	vars := map[string]string{"lock": "tls-frozen", "key": `"k"`, "ttl": "1s"}
	expectText(t, texts(t), "lost_silent", vars, ErrLost, err)
}

// A server that wants client certificates serves a client with one from
// its CA, and refuses, at connect, a client without one (told after the
// handshake under TLS 1.3, in it under TLS 1.2) or with one from another
// CA (which Go does not present: the server names the CAs it takes).
func TestClientCertificates(t *testing.T) {
	ca, clients, others := newCA(t, "server CA"), newCA(t, "client CA"), newCA(t, "other CA")
	srv := startTLSServer(t, ca, clients)
	_, _, mine := clients.leaf(t, "client", true)
	_, _, foreign := others.leaf(t, "client", true)

	holdOnce(t, connect(t, srv.addr, TLS(&tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{mine}})), "k")

	refused := []*tls.Config{
		{RootCAs: ca.pool},
		{RootCAs: ca.pool, MaxVersion: tls.VersionTLS12},
		{RootCAs: ca.pool, Certificates: []tls.Certificate{foreign}},
	}
	for _, config := range refused {
		_, err := Connect(context.Background(), srv.addr, TLS(config))
		expectTLSFailed(t, err, srv.addr, regexp.MustCompile(`^tls: `))
	}
}
