/* zygote_client.py in C, for the session's pytest zygote (support/pytest_zygote.py): the same request, replies,
 * signals, exit and stand-in, without an interpreter's start (a third of what the gate's small suites cost past the
 * fork). support/local_sandbox.py compiles it once per machine where a C compiler is there, and runs the Python
 * client where none is. Run as `zygote_client SOCKET WRAPPER MARK PYTHON -m pytest ...`, as the Python client. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_DESCRIPTORS 250 /* one message carries at most 253 */

extern char **environ;
static volatile pid_t run_pid = -1;
static const int terminating[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void forward(int number) {
    if (run_pid > 0) kill(run_pid, number);
}

/* size bytes, fewer where the connection closes first; -1 on an error */
static ssize_t receive(int connection, void *buffer, size_t size) {
    size_t got = 0;
    while (got < size) {
        ssize_t chunk = recv(connection, (char *)buffer + got, size - got, 0);
        if (chunk < 0 && errno == EINTR) continue;
        if (chunk < 0) return -1;
        if (chunk == 0) break;
        got += (size_t)chunk;
    }
    return (ssize_t)got;
}

static int send_all(int connection, const char *data, size_t size) {
    while (size) {
        ssize_t sent = send(connection, data, size, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent < 0) return -1;
        data += sent;
        size -= (size_t)sent;
    }
    return 0;
}

/* The descriptors this process was started with, in order: the listing's own left out. */
static int open_descriptors(int *descriptors) {
    DIR *listing = opendir("/proc/self/fd");
    if (listing == NULL) return -1;
    int count = 0, own = dirfd(listing);
    struct dirent *entry;
    while ((entry = readdir(listing)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        int descriptor = atoi(entry->d_name);
        struct stat status;
        if (descriptor == own || fstat(descriptor, &status) != 0) continue;
        if (count == MAX_DESCRIPTORS) {
            closedir(listing);
            return -1;
        }
        int at = count++;
        while (at > 0 && descriptors[at - 1] > descriptor) {
            descriptors[at] = descriptors[at - 1];
            at--;
        }
        descriptors[at] = descriptor;
    }
    closedir(listing);
    return count;
}

static void append(char **payload, size_t *size, size_t *room, const char *part, int separator) {
    size_t length = strlen(part) + (separator ? 1 : 0);
    if (*size + length > *room) {
        *room = (*size + length) * 2;
        *payload = realloc(*payload, *room);
        if (*payload == NULL) _exit(1);
    }
    memcpy(*payload + *size, part, length - (separator ? 1 : 0));
    *size += length;
    if (separator) (*payload)[*size - 1] = '\0';
}

/* The connection once the zygote forked the run; -1 when it declined or is not there. */
static int request(const char *socket_path, char **command, int count) {
    int descriptors[MAX_DESCRIPTORS];
    int opened = open_descriptors(descriptors);
    if (opened < 0) return -1;
    char numbers[MAX_DESCRIPTORS * 12] = "", cwd[8192], number[16];
    for (int index = 0; index < opened; index++) {
        snprintf(number, sizeof number, index ? " %d" : "%d", descriptors[index]);
        strcat(numbers, number);
    }
    if (getcwd(cwd, sizeof cwd) == NULL) return -1;
    char *payload = NULL;
    size_t size = 0, room = 0;
    snprintf(number, sizeof number, "%d", count);
    append(&payload, &size, &room, numbers, 1);
    append(&payload, &size, &room, cwd, 1);
    append(&payload, &size, &room, number, 1);
    for (int index = 0; index < count; index++) append(&payload, &size, &room, command[index], 1);
    for (char **variable = environ; *variable != NULL; variable++) append(&payload, &size, &room, *variable, 1);
    if (size) size--; /* parts are joined by NUL: no trailing one */

    int connection = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (connection < 0 || strlen(socket_path) >= sizeof address.sun_path) return -1;
    strcpy(address.sun_path, socket_path);
    uint64_t header = (uint64_t)size; /* little-endian, as this machine is */
    char rights[CMSG_SPACE(sizeof(int) * MAX_DESCRIPTORS)];
    memset(rights, 0, sizeof rights);
    struct iovec vector = {.iov_base = &header, .iov_len = sizeof header};
    struct msghdr message = {.msg_iov = &vector, .msg_iovlen = 1};
    if (opened) {
        message.msg_control = rights;
        message.msg_controllen = CMSG_SPACE(sizeof(int) * opened);
        struct cmsghdr *control = CMSG_FIRSTHDR(&message);
        control->cmsg_level = SOL_SOCKET;
        control->cmsg_type = SCM_RIGHTS;
        control->cmsg_len = CMSG_LEN(sizeof(int) * opened);
        memcpy(CMSG_DATA(control), descriptors, sizeof(int) * opened);
    }
    char reply = 0;
    int sent = connect(connection, (struct sockaddr *)&address, sizeof address) == 0 &&
               sendmsg(connection, &message, MSG_NOSIGNAL) == (ssize_t)sizeof header &&
               send_all(connection, payload, size) == 0 && receive(connection, &reply, 1) == 1 && reply == 'P';
    free(payload);
    if (sent) return connection;
    close(connection);
    return -1;
}

/* What the run left running outlived it: a process in the command's group holds the connection until the zygote
 * closes it (that group emptied), so that killing the command's group still kills what is left of the run. */
static void stand_in(int connection) {
    if (fork() != 0) return;
    for (int descriptor = 0; descriptor < 65536; descriptor++)
        if (descriptor != connection) close(descriptor);
    char buffer[64];
    while (receive(connection, buffer, sizeof buffer) > 0) {
    }
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    const char *socket_path = argv[1], *wrapper = argv[2], *mark = argv[3];
    int connection = request(socket_path, argv + 4, argc - 4);
    if (connection < 0) {
        char **again = calloc((size_t)argc, sizeof(char *));
        again[0] = (char *)wrapper;
        again[1] = (char *)mark;
        for (int index = 5; index < argc; index++) again[index - 3] = argv[index];
        execv(wrapper, again);
        return 127;
    }
    int32_t pid = 0;
    ssize_t started = receive(connection, &pid, 4);
    run_pid = started == 4 ? pid : -1;
    for (size_t index = 0; index < sizeof terminating / sizeof *terminating; index++) {
        struct sigaction current;
        sigaction(terminating[index], NULL, &current);
        if (current.sa_handler != SIG_IGN) { /* a signal for the interpreter reaches the run instead */
            struct sigaction forwarding = {.sa_handler = forward};
            sigemptyset(&forwarding.sa_mask);
            sigaction(terminating[index], &forwarding, NULL);
        }
    }
    unsigned char reply[6];
    ssize_t got = started == 4 ? receive(connection, reply, 6) : 0;
    if (got < 6 || reply[0] != 'X') { /* the zygote died: nothing else would end the run */
        for (size_t index = 0; index < sizeof terminating / sizeof *terminating; index++)
            signal(terminating[index], SIG_DFL);
        if (started == 4) {
            kill(pid, SIGKILL);
            killpg(pid, SIGKILL);
        }
        static const char broken[] = "pytest zygote: the connection broke before the run ended\n";
        if (write(2, broken, sizeof broken - 1) < 0) _exit(1);
        _exit(1);
    }
    if (reply[5] == '1') stand_in(connection);
    int32_t code;
    memcpy(&code, reply + 1, 4);
    if (code < 0) { /* killed by a signal: so is this process, for the shell to see the same */
        if (-code != SIGKILL && -code != SIGSTOP) signal(-code, SIG_DFL);
        kill(getpid(), -code);
        code = 128 - code;
    }
    _exit(code);
}
