// Included by tests that hold gRPC channels to servers that do not listen
// outside the KDC module's own gRPC reference (module.cc GrpcLibraryRef,
// which shuts gRPC down in fini): the transport's, the dealer's and the
// kdb/ticket tests. gRPC 1.51 keeps reconnecting to such servers from its
// global subchannel pool on its event-engine threads, and a TLS handshake
// still in flight at exit would run under OpenSSL's atexit cleanup
// (OPENSSL_cleanup frees the locks it takes: a SIGSEGV after every test
// passed). These programs leave OpenSSL's global state to the end of the
// process. Initialised before main (an inline variable: once per
// program), before anything else initialises OpenSSL.
#ifndef KMPC_KDC_TEST_OPENSSL_AT_EXIT_H_
#define KMPC_KDC_TEST_OPENSSL_AT_EXIT_H_

#include <openssl/crypto.h>

namespace kmpc::kdc::testing {

inline const bool kOpenSslNotCleanedAtExit =
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;

}  // namespace kmpc::kdc::testing

#endif  // KMPC_KDC_TEST_OPENSSL_AT_EXIT_H_
