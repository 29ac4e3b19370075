/* What libnbd's nbd_connect_command() and nbd_close() do, on the childguard C API:
 *
 *   connect_command: spawn `nbdkit -s --exit-with-parent memory 1M` with a socketpair on its
 *                    stdin/stdout, then speak NBD on our end (here: the handshake's first
 *                    bytes, "NBDMAGIC" then "IHAVEOPT", the newstyle server greeting, and
 *                    NBD_OPT_ABORT, what nbd_shutdown sends before any export is chosen);
 *   close:           shutdown(SHUT_RDWR) + close of our end (nbdkit sees EOF and exits), or, if
 *                    it does not, the ladder HUP -> TERM -> KILL, each rung waited for on the
 *                    child's pidfd; then the reap. Bounded by the ladder, never an unbounded
 *                    waitpid.
 *
 * Build:  cc nbd_connect_command.c $(pkg-config --cflags --libs childguard)
 * Run:    ./a.out [path-to-nbdkit]
 * See docs/embedding.md for the walk through, step by step. */
#include <childguard.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int die(const char *what) {
    fprintf(stderr, "nbd_connect_command: %s: %s\n", what, cg_last_error_message());
    return 1;
}

/* Reads exactly `len` bytes (a real client would use its event loop). */
static int read_full(int fd, char *buf, size_t len) {
    while (len > 0) {
        ssize_t got = read(fd, buf, len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        buf += got;
        len -= (size_t)got;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *nbdkit = argc > 1 ? argv[1] : "nbdkit";
    const char *command[] = {nbdkit, "-s", "--exit-with-parent", "memory", "1M", NULL};

    /* nbd_connect_command: the builder copies argv; the socket is a socketpair whose other
     * end becomes the server's fds 0 and 1. */
    cg_builder *builder = cg_builder_new(command);
    if (builder == NULL)
        return die("cg_builder_new");
    if (cg_builder_socket(builder, CG_SOCKET_STDIO, NULL) != CG_OK ||
        /* EOF first: nbdkit exits by itself when its client hangs up. */
        cg_builder_ladder(builder, "EOF:1s,HUP:1s,TERM:2s,KILL:5s") != CG_OK ||
        /* Rungs reach nbdkit's plugin helpers and filters' children too. */
        cg_builder_process_group(builder, true) != CG_OK ||
        /* The kernel kills nbdkit if we die, even by SIGKILL. */
        cg_builder_exit_with_parent(builder, true) != CG_OK) {
        cg_builder_free(builder);
        return die("configuring");
    }
    cg_handle *server = cg_spawn(builder); /* consumes the builder */
    if (server == NULL)
        return die("cg_spawn");

    /* The fd is the handle's: use it, do not close it. */
    int fd = cg_socket_fd(server);
    struct timeval ten_seconds = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &ten_seconds, sizeof ten_seconds);
    char greeting[18]; /* "NBDMAGIC", "IHAVEOPT", 16-bit handshake flags */
    int status = 0;
    if (read_full(fd, greeting, sizeof greeting) != 0) {
        fprintf(stderr, "nbd_connect_command: reading the greeting: %s\n", strerror(errno));
        status = 1;
    } else if (memcmp(greeting, "NBDMAGIC", 8) != 0 || memcmp(greeting + 8, "IHAVEOPT", 8) != 0) {
        fprintf(stderr, "nbd_connect_command: not an NBD newstyle greeting\n");
        status = 1;
    } else {
        printf("nbdkit[%d] greeted: %.8s %.8s\n", cg_pid(server), greeting, greeting + 8);
        /* Client flags (NBD_FLAG_C_FIXED_NEWSTYLE), then option NBD_OPT_ABORT (2), length 0. */
        static const char abort_option[20] = {0, 0, 0, 1, 'I', 'H', 'A', 'V', 'E', 'O',
                                              'P', 'T', 0, 0, 0, 2, 0, 0, 0, 0};
        if (write(fd, abort_option, sizeof abort_option) != (ssize_t)sizeof abort_option) {
            fprintf(stderr, "nbd_connect_command: sending NBD_OPT_ABORT: %s\n", strerror(errno));
            status = 1;
        }
    }

    /* nbd_close: consumes the handle; the report is ours to free. */
    cg_report *report = NULL;
    enum cg_status closed = cg_close(server, &report);
    if (report != NULL) {
        printf("close: %s\n", report->summary);
        for (size_t i = 0; i < report->signals_len; i++)
            printf("  rung %zu: signal %d at +%.1f ms%s\n", report->signals[i].rung,
                   report->signals[i].signal, report->signals[i].at_ms,
                   report->signals[i].to_group ? " (group)" : "");
        char *json = cg_report_json(report);
        if (json != NULL) {
            printf("json: %s\n", json);
            cg_string_free(json);
        }
        cg_report_free(report);
    }
    if (closed != CG_OK)
        return die("cg_close");
    return status;
}
