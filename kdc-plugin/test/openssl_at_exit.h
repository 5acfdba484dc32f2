// Included by the module's tests that leave gRPC channels to servers that
// do not listen: gRPC 1.51 keeps reconnecting to them from its global
// subchannel pool, on its event-engine threads, after the module's fini
// has released its channels, and a TLS handshake still in flight at exit
// runs under OpenSSL's atexit cleanup (OPENSSL_cleanup frees the locks it
// takes: a SIGSEGV after every test passed, seen in a clean clone's
// ctest). These test programs leave OpenSSL's global state to the end of
// the process. Initialised before main (an inline variable: once per
// program), before anything else initialises OpenSSL.
#ifndef KMPC_KDC_TEST_OPENSSL_AT_EXIT_H_
#define KMPC_KDC_TEST_OPENSSL_AT_EXIT_H_

#include <openssl/crypto.h>

namespace kmpc::kdc::testing {

inline const bool kOpenSslNotCleanedAtExit =
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;

}  // namespace kmpc::kdc::testing

#endif  // KMPC_KDC_TEST_OPENSSL_AT_EXIT_H_
