/* noop_milter.c -- the reference for bench_milter: a libmilter milter that
 * registers the same callbacks as retryguard-milter and does nothing in them,
 * so the benchmark's ratio isolates retryguard's own cost (identity, ledger,
 * decision) from the milter protocol's. Never used outside the benchmark. */
#include <libmilter/mfapi.h>
#include <stdio.h>
#include <string.h>

static sfsistat cont(SMFICTX* ctx) {
    (void)ctx;
    return SMFIS_CONTINUE;
}
static sfsistat on_connect(SMFICTX* ctx, char* h, _SOCK_ADDR* a) {
    (void)h;
    (void)a;
    return cont(ctx);
}
static sfsistat on_args(SMFICTX* ctx, char** argv) {
    (void)argv;
    return cont(ctx);
}
static sfsistat on_header(SMFICTX* ctx, char* n, char* v) {
    (void)n;
    (void)v;
    return cont(ctx);
}
static sfsistat on_body(SMFICTX* ctx, unsigned char* b, size_t l) {
    (void)b;
    (void)l;
    return cont(ctx);
}
static sfsistat on_eom(SMFICTX* ctx) {
    (void)ctx;
    return SMFIS_ACCEPT;
}

int main(int argc, char** argv) {
    struct smfiDesc d;
    memset(&d, 0, sizeof d);
    d.xxfi_name = "noop";
    d.xxfi_version = SMFI_VERSION;
    d.xxfi_flags = SMFIF_ADDHDRS | SMFIF_DELRCPT | SMFIF_QUARANTINE;
    d.xxfi_connect = on_connect;
    d.xxfi_envfrom = on_args;
    d.xxfi_envrcpt = on_args;
    d.xxfi_header = on_header;
    d.xxfi_body = on_body;
    d.xxfi_eom = on_eom;
    d.xxfi_abort = cont;
    d.xxfi_close = cont;
    if (argc != 2) {
        fprintf(stderr, "usage: %s SOCKET-SPEC\n", argv[0]);
        return 2;
    }
    if (smfi_setconn(argv[1]) != MI_SUCCESS || smfi_register(d) != MI_SUCCESS ||
        smfi_opensocket(1) != MI_SUCCESS)
        return 1;
    return smfi_main() == MI_SUCCESS ? 0 : 1;
}
