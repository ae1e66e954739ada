#!/usr/bin/env bash
# Throwaway certificates for the TLS test servers (issue 24), made with openssl into DIR
# (integration/backends.sh: $RUN/tls, at "up" of the first TLS server; never committed).
#
#   integration/tls/make-ca.sh DIR     make every file below unless DIR/ca.crt exists (then
#                                      nothing: the running servers use those files)
#
# ECDSA P-256 keys (fast to make, every server and client here takes them), 0600.
#   ca.crt, ca.key                 the test CA (DISTLOCK_TEST_TLS_CA is ca.crt)
#   server.crt, server.key         signed by the CA for IP 127.0.0.1 and DNS localhost
#                                  (serverAuth, clientAuth)
#   wrong-name.crt, .key           signed by the CA for DNS wrong.example only (host-name mismatch)
#   expired.crt, expired.key       signed by the CA for 127.0.0.1 and localhost, valid from
#                                  2020-01-01 to 2020-01-02 only (expired)
#   client.crt, client.key         client certificate (CN distlock-client, clientAuth), signed by the CA
#   other-ca.crt, other-ca.key     a second CA that signed nothing of the servers (wrong-CA tests:
#                                  tls_ca=other-ca.crt against any server)
#   other-server.crt, .key         signed by other-ca for 127.0.0.1 and localhost
#   other-client.crt, .key         client certificate signed by other-ca (refused by servers
#                                  that verify client certificates)
#   server.p12                     server.key with server.crt and ca.crt, PKCS#12, password
#                                  "distlock-tls" (ZooKeeper's Netty key store)
#   ca-bundle.crt                  ca.crt and other-ca.crt
# The CA certificates are valid for 30 days, the others (but expired.crt) for 20.
set -euo pipefail
dir=${1:?usage: make-ca.sh DIR}
mkdir -p "$dir"
# Servers may start side by side (integration/test_control.sh): one makes the files, the
# others wait for it and find ca.crt, which is moved in last.
exec 9>"$dir/.lock"
flock 9
[ -f "$dir/ca.crt" ] && exit 0
tmp=$(mktemp -d "$dir/.make.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
umask 077
P12_PASS=distlock-tls

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/$1.key" 2>/dev/null; }

ca() {  # ca NAME CN: a self-signed CA
    key "$1"
    openssl req -x509 -new -key "$tmp/$1.key" -subj "/O=distlock tests/CN=$2" -days 30 -sha256 \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        -out "$tmp/$1.crt" 2>/dev/null
}

# ext FILE SAN USAGE: the extensions of a leaf certificate
ext() {
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"
        [ -z "$2" ] || echo "subjectAltName=$2"
    } > "$1"
}

leaf() {  # leaf NAME CA CN SAN USAGE: a certificate signed by CA, valid now
    key "$1"
    openssl req -new -key "$tmp/$1.key" -subj "/O=distlock tests/CN=$3" -out "$tmp/$1.csr" 2>/dev/null
    ext "$tmp/$1.ext" "$4" "$5"
    openssl x509 -req -in "$tmp/$1.csr" -CA "$tmp/$2.crt" -CAkey "$tmp/$2.key" -CAcreateserial \
        -days 20 -sha256 -extfile "$tmp/$1.ext" -out "$tmp/$1.crt" 2>/dev/null
}

# expired NAME CA CN SAN: a certificate whose validity ended long ago. OpenSSL 3.0's x509
# -req has no explicit dates: "openssl ca" with -startdate/-enddate does.
expired() {
    key "$1"
    openssl req -new -key "$tmp/$1.key" -subj "/O=distlock tests/CN=$3" -out "$tmp/$1.csr" 2>/dev/null
    ext "$tmp/$1.ext" "$4" serverAuth
    mkdir -p "$tmp/ca-db"
    : > "$tmp/ca-db/index.txt"
    echo 1000 > "$tmp/ca-db/serial"
    cat > "$tmp/ca.cnf" <<CNF
[ca]
default_ca = test_ca
[test_ca]
database = $tmp/ca-db/index.txt
serial = $tmp/ca-db/serial
new_certs_dir = $tmp/ca-db
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
[any]
organizationName = optional
commonName = supplied
CNF
    openssl ca -batch -config "$tmp/ca.cnf" -cert "$tmp/$2.crt" -keyfile "$tmp/$2.key" \
        -startdate 20200101000000Z -enddate 20200102000000Z -extfile "$tmp/$1.ext" \
        -in "$tmp/$1.csr" -out "$tmp/$1.crt" -notext 2>"$tmp/ca.log" || { cat "$tmp/ca.log" >&2; return 1; }
}

ca ca "distlock test CA"
ca other-ca "distlock other test CA"
local_san="IP:127.0.0.1,DNS:localhost"
# serverAuth and clientAuth: etcd's HTTP gateway dials its own gRPC server with it, which
# asks for a client certificate under --client-cert-auth.
leaf server ca 127.0.0.1 "$local_san" serverAuth,clientAuth
leaf wrong-name ca wrong.example "DNS:wrong.example" serverAuth
expired expired ca 127.0.0.1 "$local_san"
leaf client ca distlock-client "" clientAuth
leaf other-server other-ca 127.0.0.1 "$local_san" serverAuth
leaf other-client other-ca distlock-client "" clientAuth
openssl pkcs12 -export -in "$tmp/server.crt" -inkey "$tmp/server.key" -certfile "$tmp/ca.crt" -name server \
    -passout "pass:$P12_PASS" -out "$tmp/server.p12"
cat "$tmp/ca.crt" "$tmp/other-ca.crt" > "$tmp/ca-bundle.crt"
# Certificates are public: readable by the servers that run as their own user (postgres).
for f in "$tmp"/*.crt; do chmod 0644 "$f"; done
mv "$tmp"/*.key "$tmp"/*.p12 "$dir/"
for f in "$tmp"/*.crt; do [ "$f" = "$tmp/ca.crt" ] || mv "$f" "$dir/"; done
mv "$tmp/ca.crt" "$dir/"
chmod 0755 "$dir"
