package deploy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// certAuthority signs client certificates. The suite's kube-apiserver trusts
// one for its users (--client-ca-file), and publishes it in
// kube-system/extension-apiserver-authentication, where the controller's
// endpoint reads it.
type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// pem is the certificate in PEM.
	pem []byte
}

// certValidity is how long the authority and its certificates are valid: more
// than any run of the suite.
const certValidity = 24 * time.Hour

func newCertAuthority(commonName string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of CA %s: %w", commonName, err)
	}
	tmpl, err := certTemplate(pkix.Name{CommonName: commonName})
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA %s: %w", commonName, err)
	}
	return &certAuthority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// writeCert writes the authority's certificate into dir and returns its path.
func (ca *certAuthority) writeCert(dir string) (string, error) {
	path := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(path, ca.pem, 0o600); err != nil {
		return "", fmt.Errorf("writing the client CA: %w", err)
	}
	return path, nil
}

// clientCert is a user's client certificate, as a TLS client presents it and
// as a kubeconfig holds it.
type clientCert struct {
	tls             tls.Certificate
	certPEM, keyPEM []byte
}

// userCert signs a client certificate for the user, whose groups are its
// organizations, as the API server reads them.
func (ca *certAuthority) userCert(user string, groups ...string) (*clientCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of %s: %w", user, err)
	}
	tmpl, err := certTemplate(pkix.Name{CommonName: user, Organization: groups})
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing the certificate of %s: %w", user, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the key of %s: %w", user, err)
	}
	c := &clientCert{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	if c.tls, err = tls.X509KeyPair(c.certPEM, c.keyPEM); err != nil {
		return nil, fmt.Errorf("loading the certificate of %s: %w", user, err)
	}
	return c, nil
}

func certTemplate(subject pkix.Name) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: subject, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity)}, nil
}
