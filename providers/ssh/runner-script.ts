/**
 * The command runner's host side: a small Perl program that one long-lived SSH exec channel per
 * connection runs, so the SSH user's login shell (and its start-up files: `~/.bashrc`, module
 * systems, conda) starts once per connection instead of once per command. `command-runner.ts`
 * holds the node side and the frame format.
 *
 * Perl because a stock node has it (Debian's `perl-base` is essential; RHEL nodes carry it for
 * git, Lmod's tools and most HPC stacks) and its core modules (POSIX, Fcntl, Config) are enough
 * for a select loop; POSIX sh cannot frame binary output. A node without `perl` on the user's
 * PATH says so and the connection keeps the per-command path.
 *
 * The program: every command is `/bin/sh -c LINE` in a session (and process group) of its own,
 * with its own pipes for stdin, stdout and stderr; it sees no other descriptor of the runner
 * (Perl marks every descriptor above 2 close-on-exec). Output is read only while the node has
 * granted credit for that command (so one slow reader never stalls another, and the runner's
 * memory stays bounded); stdin written to the command is acknowledged so the node sends at most
 * a window ahead. Its exit is sent once it ended and both its outputs closed (as sshd does).
 * A kill frame SIGKILLs the command's process group; the end of the channel (the connection
 * closed or dropped: sshd closes the runner's stdin) or SIGHUP/SIGTERM SIGKILLs every command
 * still running, then the runner exits.
 */
import { shellJoin } from '../shared/shell.ts';

/** The first bytes the runner writes: what a start-up file printed before it is skipped. */
export const RUNNER_MARKER = 'GYM-COMMAND-RUNNER-READY-1\n';
/** What the launch line prints when the runner cannot run here; the rest of the line is why. */
export const RUNNER_UNAVAILABLE = 'gym-runner-unavailable: ';
/** Output bytes a command may send before the node grants more (also the node's first grant). */
export const OUTPUT_WINDOW_BYTES = 1024 * 1024;

// No single quote inside (it is quoted for the shell as one word). Frames: type (1 byte),
// command id (uint32 BE), payload length (uint32 BE), payload.
const SCRIPT = `
use strict; use POSIX (); use Fcntl; use Config;
$0 = "gym-command-runner";
my @signame = split / /, $Config{sig_name};
my $EAGAIN = POSIX::EAGAIN(); my $EINTR = POSIX::EINTR();
my $WINDOW = ${OUTPUT_WINDOW_BYTES};
sub nb { my $f = shift; my $fl = fcntl($f, F_GETFL, 0); fcntl($f, F_SETFL, $fl | O_NONBLOCK); }
binmode STDIN; binmode STDOUT; nb(\\*STDIN); nb(\\*STDOUT);
pipe(my $wake_r, my $wake_w) or die "pipe: $!"; nb($wake_r); nb($wake_w);
my (%cmd, %bypid);
my $out = "${RUNNER_MARKER.replace('\n', '\\n')}";
my $in = "";
my $poll = 0.001;
sub frame { my ($t, $id, $p) = @_; $p = "" unless defined $p; $out .= pack("aNN", $t, $id, length $p) . $p; }
sub killall { for my $c (values %cmd) { kill "KILL", -$c->{pid}; kill "KILL", $c->{pid}; } }
$SIG{PIPE} = "IGNORE";
$SIG{CHLD} = sub { syswrite $wake_w, "c"; };
$SIG{TERM} = $SIG{HUP} = $SIG{INT} = sub { killall(); POSIX::_exit(0); };
sub shut { my ($c, $k) = @_; if ($c->{$k}) { close $c->{$k}; $c->{$k} = undef; } }
sub spawn {
  my ($id, $line) = @_;
  my ($ir, $iw, $or, $ow, $er, $ew);
  my $pid;
  if (pipe($ir, $iw) && pipe($or, $ow) && pipe($er, $ew)) { $pid = fork; }
  if (!defined $pid) {
    frame("R", $id, "gym command runner: cannot start the command: $!\\n"); frame("X", $id, "c255");
    for my $f ($ir, $iw, $or, $ow, $er, $ew) { close $f if $f; }
    return;
  }
  if ($pid == 0) {
    $SIG{$_} = "DEFAULT" for qw(PIPE CHLD TERM HUP INT);
    POSIX::setsid();
    POSIX::dup2(fileno $ir, 0); POSIX::dup2(fileno $ow, 1); POSIX::dup2(fileno $ew, 2);
    exec { "/bin/sh" } "sh", "-c", $line;
    POSIX::_exit(127);
  }
  close $ir; close $ow; close $ew; nb($iw); nb($or); nb($er);
  my $c = { id => $id, pid => $pid, fi => $iw, fo => $or, fe => $er, q => "", eof => 0, credit => $WINDOW, st => undef };
  $cmd{$id} = $c; $bypid{$pid} = $c;
}
sub onframe {
  my ($t, $id, $p) = @_;
  if ($t eq "S") { spawn($id, $p) unless $cmd{$id}; return; }
  my $c = $cmd{$id} or return;
  if ($t eq "I") { if ($c->{fi}) { $c->{q} .= $p; } else { frame("A", $id, pack("N", length $p)); } }
  elsif ($t eq "E") { $c->{eof} = 1; shut($c, "fi") unless length $c->{q}; }
  elsif ($t eq "C") { $c->{credit} += unpack("N", $p); }
  elsif ($t eq "K") {
    kill "KILL", -$c->{pid}; kill "KILL", $c->{pid};
    shut($c, $_) for qw(fi fo fe);
    delete $cmd{$id};
  }
}
sub io {
  my ($c, $r, $w) = @_;
  for my $s (["fo", "O"], ["fe", "R"]) {
    my ($k, $t) = @$s; my $f = $c->{$k};
    next unless $f && vec($r, fileno $f, 1) && $c->{credit} > 0;
    my $want = $c->{credit} < 65536 ? $c->{credit} : 65536;
    my $got = sysread $f, my $buf, $want;
    if (!defined $got) { shut($c, $k) unless $! == $EAGAIN; }
    elsif ($got == 0) { shut($c, $k); }
    else { $c->{credit} -= $got; frame($t, $c->{id}, $buf); }
  }
  my $f = $c->{fi};
  if ($f && length $c->{q} && vec($w, fileno $f, 1)) {
    my $k = syswrite $f, $c->{q};
    if (defined $k) { substr($c->{q}, 0, $k) = ""; frame("A", $c->{id}, pack("N", $k)); }
    elsif ($! != $EAGAIN) { frame("A", $c->{id}, pack("N", length $c->{q})); $c->{q} = ""; shut($c, "fi"); }
    shut($c, "fi") if $c->{eof} && !length $c->{q};
  }
}
for (;;) {
  my ($r, $w) = ("", "");
  vec($r, fileno STDIN, 1) = 1; vec($r, fileno $wake_r, 1) = 1;
  vec($w, fileno STDOUT, 1) = 1 if length $out;
  my $room = length($out) < 4 * $WINDOW;
  for my $c (values %cmd) {
    if ($room && $c->{credit} > 0) {
      vec($r, fileno $c->{fo}, 1) = 1 if $c->{fo};
      vec($r, fileno $c->{fe}, 1) = 1 if $c->{fe};
    }
    vec($w, fileno $c->{fi}, 1) = 1 if $c->{fi} && length $c->{q};
  }
  # SIGCHLD wakes the loop through the pipe, but Perl runs the handler only between its own
  # operations: a child that ends just before select would wait for the next event. So while a
  # command has closed its outputs and is not yet reaped, the loop also polls, from 1 ms up to 50.
  my $waiting = grep { !defined $_->{st} && !$_->{fo} && !$_->{fe} } values %cmd;
  $poll = 0.001 unless $waiting;
  my $n = select($r, $w, undef, $waiting ? $poll : undef);
  $poll *= 2 if $waiting && $poll < 0.05;
  if ($n < 0) { next if $! == $EINTR; last; }
  if (vec($r, fileno $wake_r, 1)) { sysread $wake_r, my $drain, 4096; }
  while ((my $pid = waitpid(-1, POSIX::WNOHANG())) > 0) { my $c = delete $bypid{$pid}; $c->{st} = $? if $c; }
  if (length $out && vec($w, fileno STDOUT, 1)) {
    my $k = syswrite STDOUT, $out;
    if (defined $k) { substr($out, 0, $k) = ""; } elsif ($! != $EAGAIN) { last; }
  }
  if (vec($r, fileno STDIN, 1)) {
    my $k = sysread STDIN, $in, 262144, length $in;
    if (!defined $k) { last unless $! == $EAGAIN; }
    elsif ($k == 0) { last; }
    while (length $in >= 9) {
      my ($t, $id, $len) = unpack("aNN", $in);
      last if length $in < 9 + $len;
      my $p = substr($in, 9, $len); substr($in, 0, 9 + $len) = "";
      onframe($t, $id, $p);
    }
  }
  for my $c (values %cmd) { io($c, $r, $w); }
  for my $c (values %cmd) {
    next unless defined $c->{st} && !$c->{fo} && !$c->{fe};
    shut($c, "fi");
    my $st = $c->{st}; my $sig = $st & 127;
    frame("X", $c->{id}, $sig ? "s" . (defined $signame[$sig] ? $signame[$sig] : $sig) : "c" . ($st >> 8));
    delete $cmd{$c->{id}};
  }
}
killall();
exit 0;
`;

/**
 * The line the SSH user's login shell runs: the runner when `perl` is on the PATH, else one line
 * saying why not (the connection then keeps the per-command path).
 */
export function runnerLaunchLine(): string {
  return `command -v perl >/dev/null 2>&1 || { echo ${shellJoin([`${RUNNER_UNAVAILABLE}no perl on the PATH`])}; exit 0; }; exec perl -e ${shellJoin([SCRIPT])}`;
}
