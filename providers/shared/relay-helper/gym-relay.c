/*
 * gym-relay: the in-sandbox half of gateway reach for the Kubernetes provider (over pods/exec) and
 * the Apptainer and Enroot providers (over an SSH channel); the daemon's half is ../gateway-relay.ts.
 *
 * Listens on 127.0.0.1:PORT inside the sandbox (PORT 0: any free port) and carries every
 * connection over its own stdin and stdout, which the daemon holds as one exec stream or SSH
 * channel; the daemon connects each one to its gateway socket and nowhere else. Frames, both ways:
 *
 *   type (1 byte) | connection id (4 bytes, big endian) | length (4 bytes, big endian) | payload
 *
 *   'R' relay -> daemon, id 0: listening; payload = the port (2 bytes, big endian)
 *   'O' relay -> daemon: a connection was accepted
 *   'D' both ways: bytes of a connection
 *   'E' both ways: end of that side's bytes (a half-close); the connection closes when both ended
 *   'X' daemon -> relay: drop the connection now
 *
 * Connect mode (`gym-relay connect`), the way in for a sandbox's declared ports: it listens on
 * nothing; the daemon opens each connection, and the relay connects it to 127.0.0.1:PORT inside
 * the sandbox and nowhere else (a loopback address is all it can name), so a port is reached
 * through the exec channel and a sandbox without network stays without:
 *
 *   'R' relay -> daemon, id 0: ready; payload = 0 (2 bytes)
 *   'O' daemon -> relay: connect id to 127.0.0.1:PORT; payload = PORT (2 bytes, big endian)
 *   'X' relay -> daemon: that connection was refused (nothing listens there), or dropped
 *
 * It exits when its stdin ends: a daemon that goes away (even killed with -9) takes it along.
 * Static, no libc beyond the system calls, so it runs in any Linux image of the host's CPU.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNECTIONS 64
#define HEADER 9
#define CHUNK 32768

struct connection {
  int fd;
  uint32_t id;
  int read_done;  /* the agent's side ended */
  int write_done; /* the daemon's side ended */
};

static struct connection connections[MAX_CONNECTIONS];
static unsigned char input[HEADER + CHUNK * 2];
static size_t input_length;

static void write_all(int fd, const unsigned char *data, size_t length) {
  while (length > 0) {
    ssize_t written = write(fd, data, length);
    if (written < 0) {
      if (errno == EINTR) continue;
      _exit(3);
    }
    data += written;
    length -= (size_t)written;
  }
}

static void send_frame(unsigned char type, uint32_t id, const unsigned char *payload, uint32_t length) {
  unsigned char header[HEADER];
  header[0] = type;
  uint32_t id_be = htonl(id), length_be = htonl(length);
  memcpy(header + 1, &id_be, 4);
  memcpy(header + 5, &length_be, 4);
  write_all(1, header, HEADER);
  if (length > 0) write_all(1, payload, length);
}

static struct connection *find(uint32_t id) {
  for (int i = 0; i < MAX_CONNECTIONS; i++)
    if (connections[i].fd >= 0 && connections[i].id == id) return &connections[i];
  return NULL;
}

static void drop(struct connection *connection) {
  close(connection->fd);
  connection->fd = -1;
}

static void maybe_close(struct connection *connection) {
  if (connection->read_done && connection->write_done) drop(connection);
}

/* Connect mode: the daemon's open of `id` to 127.0.0.1:port; a refusal is an 'X' back. */
static void open_connection(uint32_t id, const unsigned char *payload, uint32_t length) {
  if (length != 2 || find(id) != NULL) _exit(4);
  uint16_t port_be;
  memcpy(&port_be, payload, 2);
  int slot = -1;
  for (int i = 0; i < MAX_CONNECTIONS; i++)
    if (connections[i].fd < 0) {
      slot = i;
      break;
    }
  int fd = slot < 0 ? -1 : socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in address;
  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = port_be;
  if (fd >= 0 && connect(fd, (struct sockaddr *)&address, sizeof address) == 0) {
    connections[slot] = (struct connection){fd, id, 0, 0};
    return;
  }
  if (fd >= 0) close(fd);
  send_frame('X', id, NULL, 0);
}

static int connect_mode;

/* Handles every whole frame in the input buffer. */
static void handle_input(void) {
  size_t offset = 0;
  while (input_length - offset >= HEADER) {
    uint32_t id, length;
    memcpy(&id, input + offset + 1, 4);
    memcpy(&length, input + offset + 5, 4);
    id = ntohl(id);
    length = ntohl(length);
    if (length > CHUNK) _exit(4);
    if (input_length - offset < HEADER + length) break;
    unsigned char type = input[offset];
    if (connect_mode && type == 'O') {
      open_connection(id, input + offset + HEADER, length);
      offset += HEADER + length;
      continue;
    }
    struct connection *connection = find(id);
    if (connection != NULL) {
      if (type == 'D' && !connection->write_done) {
        /* A blocking write: an agent that stops reading holds up only its own relay. */
        const unsigned char *data = input + offset + HEADER;
        size_t left = length;
        while (left > 0) {
          ssize_t written = write(connection->fd, data, left);
          if (written < 0 && errno == EINTR) continue;
          if (written <= 0) {
            send_frame('E', id, NULL, 0);
            drop(connection);
            break;
          }
          data += written;
          left -= (size_t)written;
        }
      } else if (type == 'E') {
        shutdown(connection->fd, SHUT_WR);
        connection->write_done = 1;
        maybe_close(connection);
      } else if (type == 'X') {
        drop(connection);
      }
    }
    offset += HEADER + length;
  }
  memmove(input, input + offset, input_length - offset);
  input_length -= offset;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  for (int i = 0; i < MAX_CONNECTIONS; i++) connections[i].fd = -1;
  connect_mode = strcmp(argv[1], "connect") == 0;
  int listener = -1;
  unsigned char port[2] = {0, 0};
  if (!connect_mode) {
    listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) return 5;
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address;
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons((uint16_t)atoi(argv[1]));
    if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0 || listen(listener, 64) < 0) return 6;
    socklen_t size = sizeof address;
    getsockname(listener, (struct sockaddr *)&address, &size);
    uint16_t port_be = address.sin_port;
    memcpy(port, &port_be, 2);
  }
  send_frame('R', 0, port, 2);

  uint32_t next_id = 1;
  struct pollfd fds[MAX_CONNECTIONS + 2];
  int owners[MAX_CONNECTIONS + 2];
  unsigned char buffer[CHUNK];
  for (;;) {
    int count = 0;
    fds[count].fd = 0;
    fds[count].events = POLLIN;
    owners[count++] = -1;
    if (listener >= 0) {
      fds[count].fd = listener;
      fds[count].events = POLLIN;
      owners[count++] = -2;
    }
    for (int i = 0; i < MAX_CONNECTIONS; i++) {
      if (connections[i].fd < 0 || connections[i].read_done) continue;
      fds[count].fd = connections[i].fd;
      fds[count].events = POLLIN;
      owners[count++] = i;
    }
    if (poll(fds, (nfds_t)count, -1) < 0) {
      if (errno == EINTR) continue;
      return 7;
    }
    for (int k = 0; k < count; k++) {
      if (fds[k].revents == 0) continue;
      if (owners[k] == -1) {
        ssize_t got = read(0, input + input_length, sizeof input - input_length);
        if (got == 0) return 0; /* the daemon went away */
        if (got < 0) {
          if (errno == EINTR) continue;
          return 8;
        }
        input_length += (size_t)got;
        handle_input();
      } else if (owners[k] == -2) {
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        int slot = -1;
        for (int i = 0; i < MAX_CONNECTIONS; i++)
          if (connections[i].fd < 0) {
            slot = i;
            break;
          }
        if (slot < 0) {
          close(fd);
          continue;
        }
        connections[slot] = (struct connection){fd, next_id++, 0, 0};
        send_frame('O', connections[slot].id, NULL, 0);
      } else {
        struct connection *connection = &connections[owners[k]];
        if (connection->fd < 0) continue;
        ssize_t got = read(connection->fd, buffer, sizeof buffer);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
          send_frame('E', connection->id, NULL, 0);
          connection->read_done = 1;
          if (got < 0) connection->write_done = 1;
          maybe_close(connection);
        } else {
          send_frame('D', connection->id, buffer, (uint32_t)got);
        }
      }
    }
  }
}
