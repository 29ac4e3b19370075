/* Shared by the C tests of the childguard C API: failing checks, slowserver's READY line,
 * counting our open fds. Each test exits 0 on success, 1 with a message on the first failure.
 * Run by tests/tests/ffi.rs (plain and under valgrind) with slowserver's path as argv[1]. */
#ifndef CG_TEST_CHECK_H
#define CG_TEST_CHECK_H

#include <childguard.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...)                                                            \
    do {                                                                     \
        fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__);              \
        fprintf(stderr, __VA_ARGS__);                                        \
        fprintf(stderr, "\n");                                               \
        exit(1);                                                             \
    } while (0)

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check `%s` failed: ", __FILE__, __LINE__, \
                    #cond);                                                  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

/* A call that must return CG_OK. */
#define OK(call)                                                             \
    do {                                                                     \
        enum cg_status st_ = (call);                                         \
        if (st_ != CG_OK)                                                    \
            FAIL("%s returned %d: %s", #call, (int)st_, cg_last_error_message()); \
    } while (0)

/* A call that must fail with `code`, the last error being that code and its message holding
 * `needle`; the message is printed (tests/ffi.rs looks for it). */
#define EXPECT_ERROR(call, code, needle)                                              \
    do {                                                                              \
        enum cg_status st_ = (call);                                                  \
        CHECK(st_ == (code), "%s gave %d, not %s", #call, (int)st_, #code);           \
        CHECK(cg_last_error_code() == (code), "last code %d", (int)cg_last_error_code()); \
        CHECK(strstr(cg_last_error_message(), (needle)) != NULL, "%s: message %s", #call, \
              cg_last_error_message());                                               \
        printf("%s\n", cg_last_error_message());                                      \
    } while (0)

/* /proc/PID/status's State letter, or 0 if there is no such process. */
static inline char proc_state(int pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char state = '?';
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "State:", 6) == 0) {
            char *p = line + 6;
            while (*p == ' ' || *p == '\t')
                p++;
            state = *p;
            break;
        }
    }
    fclose(f);
    return state;
}

static inline const char *slowserver_path(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH-TO-SLOWSERVER\n", argv[0]);
        exit(2);
    }
    return argv[1];
}

/* Reads one line from `fd` into `line` (NUL-terminated, at most `size` - 1 bytes), byte by byte
 * so that nothing after the newline is consumed; `what` names it in the failure. */
static inline void read_line(int fd, char *line, size_t size, const char *what) {
    size_t n = 0;
    while (n + 1 < size) {
        ssize_t got = read(fd, line + n, 1);
        if (got < 0 && errno == EINTR)
            continue;
        CHECK(got == 1, "reading %s: %s", what, got < 0 ? strerror(errno) : "EOF");
        if (line[n++] == '\n')
            break;
    }
    line[n] = '\0';
}

/* Reads slowserver's `READY pid=... grandchild=...` line from the socket into `line`: once it
 * is read, the server has set up its signals. */
static inline void read_ready_line(int fd, char *line, size_t size) {
    read_line(fd, line, size, "READY");
    CHECK(strncmp(line, "READY pid=", 10) == 0, "not a READY line: %s", line);
}

static inline void read_ready(int fd) {
    char line[256];
    read_ready_line(fd, line, sizeof line);
}

/* Writes all of `text` to the socket. */
static inline void send_text(int fd, const char *text) {
    size_t len = strlen(text);
    while (len > 0) {
        ssize_t put = write(fd, text, len);
        if (put < 0 && errno == EINTR)
            continue;
        CHECK(put > 0, "writing %s: %s", text, strerror(errno));
        text += put;
        len -= (size_t)put;
    }
}

/* How many fds this process has open (the directory stream's own fd not counted). */
static inline int open_fds(void) {
    DIR *dir = opendir("/proc/self/fd");
    CHECK(dir != NULL, "opendir /proc/self/fd: %s", strerror(errno));
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] != '.' && atoi(entry->d_name) != dirfd(dir))
            count++;
    }
    closedir(dir);
    return count;
}

/* A builder for slowserver with `flags` (a NULL-terminated list), on a socketpair. */
static inline cg_builder *slowserver(const char *path, const char *const *flags) {
    const char *argv[16];
    size_t n = 0;
    argv[n++] = path;
    for (; flags && *flags && n + 1 < sizeof argv / sizeof *argv; flags++)
        argv[n++] = *flags;
    argv[n] = NULL;
    cg_builder *b = cg_builder_new(argv);
    CHECK(b != NULL, "cg_builder_new: %s", cg_last_error_message());
    OK(cg_builder_socket(b, CG_SOCKET_STDIO, NULL));
    return b;
}

#endif
