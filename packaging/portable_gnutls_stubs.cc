// gpureap links libmicrohttpd statically (Debian's libmicrohttpd.a): the portable
// binary still needs only glibc, and no command loads GnuTLS at start-up for TLS it
// never uses (CMakeLists.txt). Debian builds that archive with HTTPS support,
// so it refers to GnuTLS, whose static library Debian does not ship. gpureap never
// starts libmicrohttpd with MHD_USE_TLS (agent/http_server.cc: plain HTTP on an
// address of the operator's choosing), so no TLS code path runs; these definitions
// only satisfy the linker. libmicrohttpd's constructor calls gnutls_global_init()
// and its destructor gnutls_global_deinit(): both return 0 here, as every stub does.
// The list is `nm -u libmicrohttpd.a | grep gnutls_` (libmicrohttpd 0.9.75, bookworm);
// a newer archive that needs another symbol fails to link `make portable`, loudly.
// Linked into every executable that links the agent (CMakeLists.txt, GPUREAP_GNUTLS_STUBS).

extern "C" {
// A variable in GnuTLS (gnutls_alloc_function gnutls_malloc), read only on TLS paths.
void* gnutls_malloc = nullptr;
long gnutls_alpn_set_protocols() { return 0; }
long gnutls_bye() { return 0; }
long gnutls_certificate_allocate_credentials() { return 0; }
long gnutls_certificate_free_credentials() { return 0; }
long gnutls_certificate_server_set_request() { return 0; }
long gnutls_certificate_set_dh_params() { return 0; }
long gnutls_certificate_set_retrieve_function2() { return 0; }
long gnutls_certificate_set_retrieve_function3() { return 0; }
long gnutls_certificate_set_x509_key_mem() { return 0; }
long gnutls_certificate_set_x509_key_mem2() { return 0; }
long gnutls_certificate_set_x509_trust_mem() { return 0; }
long gnutls_cipher_get() { return 0; }
long gnutls_credentials_set() { return 0; }
long gnutls_deinit() { return 0; }
long gnutls_dh_params_deinit() { return 0; }
long gnutls_dh_params_import_pkcs3() { return 0; }
long gnutls_dh_params_init() { return 0; }
long gnutls_global_deinit() { return 0; }
long gnutls_global_init() { return 0; }
long gnutls_handshake() { return 0; }
long gnutls_init() { return 0; }
long gnutls_priority_deinit() { return 0; }
long gnutls_priority_init() { return 0; }
long gnutls_priority_set() { return 0; }
long gnutls_protocol_get_version() { return 0; }
long gnutls_psk_allocate_server_credentials() { return 0; }
long gnutls_psk_free_server_credentials() { return 0; }
long gnutls_psk_set_server_credentials_function() { return 0; }
long gnutls_record_check_pending() { return 0; }
long gnutls_record_get_direction() { return 0; }
long gnutls_record_recv() { return 0; }
long gnutls_record_send() { return 0; }
long gnutls_session_get_ptr() { return 0; }
long gnutls_session_set_ptr() { return 0; }
long gnutls_strerror() { return 0; }
long gnutls_transport_set_int2() { return 0; }
}
