package auth

import (
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// minRSABits is the smallest RSA modulus accepted for RS256 keys.
const minRSABits = 2048

// parsePublicKey reads JWT_PUBLIC_KEY: one PEM block holding an RSA or
// Ed25519 public key (PKIX, PKCS#1 or inside a certificate). It returns
// *rsa.PublicKey or ed25519.PublicKey and the algorithm the key serves.
func parsePublicKey(s string) (any, string, error) {
	if !strings.Contains(s, "\n") {
		s = strings.ReplaceAll(s, `\n`, "\n")
	}
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, "", errors.New("JWT_PUBLIC_KEY is not PEM (want -----BEGIN PUBLIC KEY-----)")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		if strings.Contains(block.Type, "PRIVATE") {
			return nil, "", fmt.Errorf("JWT_PUBLIC_KEY holds a %s: give the public key only", block.Type)
		}
		return nil, "", fmt.Errorf("JWT_PUBLIC_KEY: PEM block %q is not a public key", block.Type)
	}
	if err != nil {
		return nil, "", fmt.Errorf("JWT_PUBLIC_KEY: %w", err)
	}
	return classify(key)
}

// classify accepts the public key types Regina verifies with and names
// the algorithm each serves.
func classify(key any) (any, string, error) {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return nil, "", fmt.Errorf("RSA key of %d bits: at least %d are needed", k.N.BitLen(), minRSABits)
		}
		return k, RS256, nil
	case ed25519.PublicKey:
		return k, EdDSA, nil
	}
	return nil, "", fmt.Errorf("a %T key: only RSA (RS256) and Ed25519 (EdDSA) public keys are supported", key)
}
