#!/usr/bin/env bash
# Throwaway TLS material for the TLS tests, made with openssl in DIR:
#   ca.crt/ca.key         the test CA
#   server.crt/.key       signed by it, for localhost and 127.0.0.1 (also
#                         serves as a client certificate for mutual TLS)
#   client.crt/.key       a client certificate signed by the CA
#   expired.crt/.key      a server certificate that expired yesterday
#   other-ca.crt/.key     an unrelated CA (the "wrong CA")
#   other.crt/.key        a certificate signed by the unrelated CA
# Usage: make_certs.sh DIR
set -euo pipefail
d="$1"
mkdir -p "$d"
cd "$d"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # name cn
  key "$1.key"
  # keyUsage: Python 3.13's default contexts verify strictly (VERIFY_X509_STRICT)
  # and refuse a CA certificate without it
  openssl req -x509 -new -key "$1.key" -out "$1.crt" -days 2 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
leaf() { # name ca days cn
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$4" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial \
    -out "$1.crt" -days "$3" -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca hilock-test-ca
ca other-ca hilock-other-ca
leaf server ca 2 localhost
leaf client ca 2 hilock-client
leaf expired ca -1 localhost
leaf other other-ca 2 localhost
chmod 644 ./*.key
