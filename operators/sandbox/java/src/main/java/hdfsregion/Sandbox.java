package hdfsregion;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.hdfs.server.datanode.DataNodeTestUtils;
import org.apache.hadoop.hdfs.server.namenode.NameNode;
import org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;
import sun.misc.Signal;

/**
 * A real HDFS (Hadoop's MiniDFSCluster: NameNode and DataNodes in this JVM) for trying, testing
 * and benchmarking hdfs-region.
 *
 * <p>Arguments: {@code BASE_DIR [--datanodes N] [--ha] [--secure] [--block-size BYTES] [--yarn]
 * [--nodemanagers N] [--dead-after SECONDS]}. {@code --dead-after} (default 16, at least 12) is
 * how long the NameNode counts a silent DataNode as live; a production NameNode's is 630. {@code --yarn} adds a ResourceManager and NodeManagers (Hadoop's
 * MiniYARNCluster, see {@link Yarn}) whose applications stage their files on this HDFS;
 * with {@code --secure} they are Kerberized too ({@link Secure#configureYarn}).
 * {@code --block-size} (default 1 MiB, HDFS's minimum) is the NameNode's {@code dfs.blocksize}
 * and the one written into the clients' configuration, so that every client writes blocks of it. {@code --secure} starts a
 * Kerberos KDC (Hadoop's MiniKdc) first and a Kerberized cluster: RPC authenticated by Kerberos,
 * SASL on the data transfer protocol (block access tokens), WebHDFS over HTTPS only with a
 * certificate signed by a CA generated here (see {@link Secure}). Ports are ephemeral. When the cluster is
 * up, the first line on stdout is one JSON object with its URIs and the client configuration
 * directory it wrote; each later line answers one command read from stdin:
 *
 * <pre>
 *   stop-datanode I | start-datanode I | restart-datanode I | restart-namenode [I] | status
 *   pause-ibr I | resume-ibr I                       (hold, then send, reports of new replicas)
 *   stop-nodemanager I | start-nodemanager I        (with --yarn)
 * </pre>
 *
 * Every command is answered within {@code --command-timeout} seconds (default 90): one still
 * running then is answered with an error, and later commands are refused as busy until it ends.
 *
 * <p>End of stdin leaves the cluster running; SIGINT / SIGTERM shut it down (exit 0), or, when
 * the cluster's shutdown fails or takes longer than {@link #SHUTDOWN_SECONDS}, halt the JVM
 * (exit 1). Everything Hadoop logs goes to the log file set by the caller's log4j configuration,
 * never to stdout.
 */
public final class Sandbox {
  private static final String NAMESERVICE = "sandbox";
  /** MiniDFSCluster's own name of the HA name service (MiniDFSNNTopology.simpleHATopology). */
  private static final String MINI_NAMESERVICE = "minidfs-ns";
  /** 1 MiB, HDFS's smallest block (dfs.namenode.fs-limits.min-block-size). */
  private static final long MIN_BLOCK_SIZE = 1024 * 1024;
  /** How long a SIGTERM waits for the cluster's shutdown before halting the JVM. */
  private static final long SHUTDOWN_SECONDS = 30;

  private final MiniDFSCluster cluster;
  private final boolean ha;
  private final PrintStream out;
  private final Secure secure;
  private Yarn yarn;
  private final Map<Integer, MiniDFSCluster.DataNodeProperties> stopped = new HashMap<>();
  private final long commandTimeoutMs;
  /** One command at a time, in its own thread, so that the reader can answer within a bound. */
  private final ExecutorService worker =
      Executors.newSingleThreadExecutor(
          r -> {
            Thread t = new Thread(r, "sandbox-command");
            t.setDaemon(true);
            return t;
          });
  private Future<String> running;
  private String runningLine;

  private Sandbox(
      MiniDFSCluster cluster, boolean ha, Secure secure, PrintStream out, long commandTimeoutMs) {
    this.cluster = cluster;
    this.ha = ha;
    this.secure = secure;
    this.out = out;
    this.commandTimeoutMs = commandTimeoutMs;
  }

  public static void main(String[] args) throws Exception {
    // stdout carries only our JSON lines: whatever else prints goes to stderr.
    PrintStream out = new PrintStream(new FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
    System.setOut(System.err);
    if (args.length < 1) {
      System.err.println("usage: Sandbox BASE_DIR [--datanodes N] [--ha]");
      System.exit(2);
    }
    File base = new File(args[0]).getAbsoluteFile();
    int datanodes = 1;
    boolean ha = false;
    boolean secured = false;
    long tokenLifetimeMs = 0;
    long commandTimeoutMs = 90_000;
    long blockSize = MIN_BLOCK_SIZE;
    int nodeManagers = 0;
    double deadAfter = 16;
    for (int i = 1; i < args.length; i++) {
      if (args[i].equals("--datanodes") && i + 1 < args.length) {
        datanodes = Integer.parseInt(args[++i]);
      } else if (args[i].equals("--ha")) {
        ha = true;
      } else if (args[i].equals("--yarn")) {
        nodeManagers = Math.max(nodeManagers, 1);
      } else if (args[i].equals("--nodemanagers") && i + 1 < args.length) {
        nodeManagers = Integer.parseInt(args[++i]);
      } else if (args[i].equals("--secure")) {
        secured = true;
      } else if (args[i].equals("--token-lifetime") && i + 1 < args.length) {
        tokenLifetimeMs = (long) (Double.parseDouble(args[++i]) * 1000);
      } else if (args[i].equals("--block-size") && i + 1 < args.length) {
        blockSize = Long.parseLong(args[++i]);
        if (blockSize < MIN_BLOCK_SIZE || blockSize % 512 != 0) {
          System.err.println(
              "--block-size: " + blockSize + " is not a multiple of 512 of at least 1048576");
          System.exit(2);
        }
      } else if (args[i].equals("--dead-after") && i + 1 < args.length) {
        deadAfter = Double.parseDouble(args[++i]);
        if (deadAfter < 12) {
          System.err.println("--dead-after: " + deadAfter + " is under 12 seconds");
          System.exit(2);
        }
      } else if (args[i].equals("--command-timeout") && i + 1 < args.length) {
        commandTimeoutMs = (long) (Double.parseDouble(args[++i]) * 1000);
      } else {
        System.err.println("unknown argument: " + args[i]);
        System.exit(2);
      }
    }
    long started = System.nanoTime();
    Secure secure = secured ? Secure.start(base, tokenLifetimeMs) : null;
    MiniDFSCluster cluster = start(base, datanodes, ha, secure, blockSize, deadAfter);
    Sandbox sandbox = new Sandbox(cluster, ha, secure, out, commandTimeoutMs);
    if (nodeManagers > 0) {
      sandbox.yarn = Yarn.start(base, nodeManagers, sandbox.hdfsUri(), secure);
    }
    // SIGINT / SIGTERM stop the cluster from this thread, not from a JVM shutdown hook: Hadoop's
    // own hooks refuse to be removed while the JVM shuts down, which breaks an orderly stop.
    CountDownLatch stop = new CountDownLatch(1);
    for (String name : new String[] {"INT", "TERM"}) {
      Signal.handle(new Signal(name), sig -> stop.countDown());
    }
    File confDir = sandbox.writeClientConf(new File(base, "conf"));
    double seconds = (System.nanoTime() - started) / 1e9;
    out.println(sandbox.readyLine(base, confDir, datanodes, seconds));
    // A parent that dies without stopping us (SIGKILL, a crashed test run) stops us too.
    ProcessHandle.current().parent().ifPresent(p -> p.onExit().thenRun(stop::countDown));
    Thread commands = new Thread(sandbox::serve, "sandbox-commands");
    commands.setDaemon(true);
    commands.start();
    // End of stdin leaves the cluster running: only a signal stops it.
    stop.await();
    // A bounded shutdown, then halt: a cluster in a bad state (a command still running and
    // holding the cluster's monitor, a NameNode that fails while closing its edit log) must not
    // keep the process alive, and Hadoop's shutdown hooks must not wait for it either.
    int[] code = {1};
    Thread down =
        new Thread(
            () -> {
              try {
                sandbox.shutdown();
                if (secure != null) {
                  secure.stop();
                }
                code[0] = 0;
              } catch (Throwable e) {
                System.err.println("sandbox: shutdown failed: " + e);
              }
            },
            "sandbox-shutdown");
    down.setDaemon(true);
    down.start();
    down.join(SHUTDOWN_SECONDS * 1000);
    if (down.isAlive()) {
      System.err.println(
          "sandbox: the cluster did not shut down within " + SHUTDOWN_SECONDS + " s: halting");
    }
    System.err.flush();
    Runtime.getRuntime().halt(down.isAlive() ? 1 : code[0]);
  }

  private static MiniDFSCluster start(
      File base, int datanodes, boolean ha, Secure secure, long blockSize, double deadAfter)
      throws IOException {
    Configuration conf = new HdfsConfiguration();
    if (secure != null) {
      secure.configure(conf);
    }
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(base, "data").getPath());
    conf.setInt("dfs.replication", Math.min(datanodes, 3));
    conf.setBoolean("dfs.permissions.enabled", true);
    // A dead DataNode is noticed in seconds (16 by default), not the default 10.5 minutes: the
    // NameNode declares it dead after 2 rechecks and 10 heartbeats of silence.
    conf.setInt("dfs.namenode.heartbeat.recheck-interval", (int) ((deadAfter - 10) * 500));
    conf.setInt("dfs.heartbeat.interval", 1);
    // Blocks of 1 MiB (the minimum) by default: truncates and appends cross block boundaries at
    // test sizes. Benchmarks ask for a production size (128 MiB).
    conf.setLong("dfs.blocksize", blockSize);
    boolean reuse = new File(base, "data/name1").isDirectory();
    MiniDFSCluster.Builder builder =
        new MiniDFSCluster.Builder(conf).numDataNodes(datanodes).format(!reuse);
    if (ha) {
      builder.nnTopology(MiniDFSNNTopology.simpleHATopology(2));
      // A NameNode restarted in HA names the name service in its WebHDFS redirects
      // (namenoderpcaddress=minidfs-ns): the DataNodes (which inherit this configuration) must
      // resolve it as an HA client does, else every WebHDFS write fails with
      // UnknownHostException. MiniDFSCluster adds the name service's addresses itself.
      conf.set(
          "dfs.client.failover.proxy.provider." + MINI_NAMESERVICE,
          ConfiguredFailoverProxyProvider.class.getName());
      // The standby reads the shared edits every second (default: a minute), so that it is
      // current when it becomes active or restarts.
      conf.set("dfs.ha.tail-edits.period", "1s");
    }
    MiniDFSCluster cluster = builder.build();
    if (ha) {
      cluster.transitionToActive(0);
    }
    cluster.waitActive();
    DistributedFileSystem fs = cluster.getFileSystem(0);
    // A sandbox for any local user: the root is open, /tmp is sticky as on a real cluster.
    fs.setPermission(new Path("/"), new FsPermission((short) 0777));
    fs.mkdirs(new Path("/tmp"));
    fs.setPermission(new Path("/tmp"), new FsPermission((short) 01777));
    return cluster;
  }

  private String hdfsUri() {
    if (ha) {
      return "hdfs://" + NAMESERVICE;
    }
    return "hdfs://127.0.0.1:" + cluster.getNameNodePort();
  }

  private List<String> httpAddresses() {
    List<String> out = new ArrayList<>();
    for (int i = 0; i < cluster.getNumNameNodes(); i++) {
      NameNode nn = cluster.getNameNode(i);
      int port =
          secure != null ? nn.getHttpsAddress().getPort() : nn.getHttpAddress().getPort();
      out.add("127.0.0.1:" + port);
    }
    return out;
  }

  private List<String> rpcAddresses() {
    List<String> out = new ArrayList<>();
    for (int i = 0; i < cluster.getNumNameNodes(); i++) {
      out.add("127.0.0.1:" + cluster.getNameNodePort(i));
    }
    return out;
  }

  /** The key of the NameNodes' WebHDFS addresses: the secure cluster serves HTTPS only. */
  private String httpKey() {
    return secure != null ? "dfs.namenode.https-address" : "dfs.namenode.http-address";
  }

  /** core-site.xml and hdfs-site.xml for clients (HADOOP_CONF_DIR). */
  private File writeClientConf(File dir) throws IOException {
    if (!dir.isDirectory() && !dir.mkdirs()) {
      throw new IOException("cannot create " + dir);
    }
    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", hdfsUri());
    Configuration hdfs = new Configuration(false);
    hdfs.set("dfs.replication", cluster.getConfiguration(0).get("dfs.replication"));
    // Hadoop's client writes blocks of its own dfs.blocksize (128 MiB unless told): the
    // cluster's, as hdfs-native (which asks the NameNode's defaults) does.
    hdfs.set("dfs.blocksize", cluster.getConfiguration(0).get("dfs.blocksize"));
    List<String> rpc = rpcAddresses();
    List<String> http = httpAddresses();
    if (ha) {
      hdfs.set("dfs.nameservices", NAMESERVICE);
      List<String> ids = new ArrayList<>();
      for (int i = 0; i < rpc.size(); i++) {
        String id = "nn" + i;
        ids.add(id);
        hdfs.set("dfs.namenode.rpc-address." + NAMESERVICE + "." + id, rpc.get(i));
        hdfs.set(httpKey() + "." + NAMESERVICE + "." + id, http.get(i));
      }
      hdfs.set("dfs.ha.namenodes." + NAMESERVICE, String.join(",", ids));
      hdfs.set(
          "dfs.client.failover.proxy.provider." + NAMESERVICE,
          "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
    } else {
      hdfs.set("dfs.namenode.rpc-address", rpc.get(0));
      hdfs.set(httpKey(), http.get(0));
    }
    if (secure != null) {
      secure.clientConf(core, hdfs);
    }
    writeXml(core, new File(dir, "core-site.xml"));
    writeXml(hdfs, new File(dir, "hdfs-site.xml"));
    if (yarn != null) {
      writeXml(yarn.clientConf(), new File(dir, "yarn-site.xml"));
    }
    return dir;
  }

  private static void writeXml(Configuration conf, File file) throws IOException {
    File tmp = new File(file.getPath() + ".tmp");
    try (OutputStream os = new FileOutputStream(tmp)) {
      conf.writeXml(os);
    }
    if (!tmp.renameTo(file)) {
      throw new IOException("cannot rename " + tmp + " to " + file);
    }
  }

  private String readyLine(File base, File confDir, int datanodes, double seconds) {
    List<String> http = httpAddresses();
    StringBuilder webhdfs = new StringBuilder(secure != null ? "swebhdfs://" : "webhdfs://");
    webhdfs.append(String.join(",", http));
    return "{\"hdfs\": " + quote(hdfsUri())
        + ", \"webhdfs\": " + quote(webhdfs.toString())
        + ", \"namenodes\": " + quoteList(rpcAddresses())
        + ", \"http\": " + quoteList(http)
        + ", \"conf_dir\": " + quote(confDir.getPath())
        + ", \"base_dir\": " + quote(base.getPath())
        + ", \"datanodes\": " + datanodes
        + ", \"ha\": " + ha
        + ", \"pid\": " + ProcessHandle.current().pid()
        + ", \"start_seconds\": " + String.format(java.util.Locale.ROOT, "%.3f", seconds)
        + (secure != null ? secure.json() : "")
        + (yarn != null ? yarn.json() : "")
        + "}";
  }

  /** Read commands from stdin until it closes, answering each with one JSON line. */
  private void serve() {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = readLine(in)) != null) {
      line = line.trim();
      if (line.isEmpty()) {
        continue;
      }
      String[] words = line.split("\\s+");
      try {
        String detail = runBounded(line, words);
        out.println("{\"ok\": true, \"command\": " + quote(line) + detail + "}");
      } catch (Exception e) {
        Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        System.err.println("sandbox: " + line + " failed: " + cause);
        out.println("{\"ok\": false, \"command\": " + quote(line) + ", \"error\": "
            + quote(cause.getClass().getSimpleName() + ": " + cause.getMessage()) + "}");
      }
    }
  }

  /**
   * Run one command in the worker thread and wait at most the command timeout for it. A command
   * still running then stays running (Hadoop's waits ignore interrupts): the answer says so, and
   * later commands are refused until it ends.
   */
  private String runBounded(String line, String[] words) throws Exception {
    if (running != null && !running.isDone()) {
      throw new IllegalStateException(
          "busy: " + runningLine + " is still running (it did not finish within the command "
              + "timeout); try again later");
    }
    running = worker.submit(() -> run(words));
    runningLine = line;
    try {
      return running.get(commandTimeoutMs, TimeUnit.MILLISECONDS);
    } catch (TimeoutException e) {
      // Not cancelled: an interrupt can stop a restart halfway (a NameNode left null, which a
      // later command then meets), and a cancelled future reads as done, so the next command
      // would not be refused as busy while this one still runs.
      throw new TimeoutException(
          line + " did not finish within " + commandTimeoutMs / 1000.0 + " s (the command "
              + "timeout); the cluster may be unusable: stop the sandbox and start it again");
    }
  }

  private static String readLine(BufferedReader in) {
    try {
      return in.readLine();
    } catch (IOException e) {
      return null;
    }
  }

  private String run(String[] words) throws Exception {
    String cmd = words[0];
    int index = words.length > 1 ? Integer.parseInt(words[1]) : 0;
    switch (cmd) {
      case "stop-datanode":
        if (stopped.containsKey(index)) {
          throw new IllegalStateException("datanode " + index + " is already stopped");
        }
        stopped.put(index, cluster.stopDataNode(index));
        return "";
      case "start-datanode": {
        MiniDFSCluster.DataNodeProperties props = stopped.remove(index);
        if (props == null) {
          throw new IllegalStateException("datanode " + index + " is not stopped");
        }
        // restartDataNode appends it to the list: indexes of the others shift as in MiniDFSCluster.
        cluster.restartDataNode(props, true);
        cluster.waitActive();
        return "";
      }
      case "pause-ibr":
        // The DataNode's reports of new replicas wait (as a busy NameNode or network makes
        // them trail a close): what a client asks right after a write meets that lag.
        DataNodeTestUtils.pauseIBR(cluster.getDataNodes().get(index));
        return "";
      case "resume-ibr":
        DataNodeTestUtils.resumeIBR(cluster.getDataNodes().get(index));
        return "";
      case "restart-datanode":
        cluster.restartDataNode(index, true);
        cluster.waitActive();
        return "";
      case "restart-namenode": {
        // Same ports: clients reconnect to the address they know. Not MiniDFSCluster's own wait
        // (it waits without end): ours stops when the command times out.
        boolean otherActive = false;
        for (int i = 0; ha && i < cluster.getNumNameNodes(); i++) {
          NameNode nn = i == index ? null : cluster.getNameNode(i);
          otherActive |= nn != null && nn.isActiveState();
        }
        cluster.restartNameNode(index, false);
        // In HA the restarted NameNode becomes active again only when no other one is: two
        // active NameNodes would both write the shared edits (and fail at shutdown).
        boolean active = !ha || !otherActive;
        if (ha && active) {
          cluster.transitionToActive(index);
        }
        // Restarted: an active NameNode once out of safe mode; a standby once every DataNode
        // reported to it (it may stay in safe mode until it has read the newest edits).
        int live = cluster.getDataNodes().size();
        while (active
            ? !cluster.isNameNodeUp(index)
            : cluster.getNamesystem(index).getNumLiveDataNodes() < live) {
          Thread.sleep(200); // an interrupt (the command timed out) ends the wait
        }
        return "";
      }
      case "stop-nodemanager":
        requireYarn().stopNodeManager(index);
        return "";
      case "start-nodemanager":
        requireYarn().startNodeManager(index);
        return "";
      case "status":
        return ", \"datanodes\": " + cluster.getDataNodes().size()
            + ", \"http\": " + quoteList(httpAddresses())
            + ", \"namenodes\": " + quoteList(rpcAddresses())
            + (yarn != null ? ", \"nodemanagers_running\": " + yarn.running() : "");
      default:
        throw new IllegalArgumentException("unknown command " + cmd);
    }
  }

  private Yarn requireYarn() {
    if (yarn == null) {
      throw new IllegalStateException("no YARN in this sandbox (start it with --yarn)");
    }
    return yarn;
  }

  private void shutdown() throws InterruptedException {
    System.err.println("sandbox: shutting down");
    if (yarn != null) {
      yarn.stop();
    }
    try {
      FileSystem.closeAll();
    } catch (IOException e) {
      System.err.println("sandbox: closing clients: " + e);
    }
    cluster.shutdown(false, false);
    System.err.println("sandbox: stopped");
  }

  /**
   * The Kerberos side of {@code --secure}: a MiniKdc with the cluster's service principals and a
   * user's, keytabs, a CA and the NameNode's / DataNodes' HTTPS keystore signed by it.
   *
   * <p>Principals: {@code hdfs/localhost} (NameNode and DataNodes, the cluster's superuser),
   * {@code HTTP/localhost} and {@code HTTP/127.0.0.1} (SPNEGO, whichever name a client asks
   * for), {@code tester} (the user, keytab {@code user.keytab}) and {@code intruder} (a keytab
   * of another principal, {@code intruder.keytab}, for the refusals a user must see).
   */
  static final class Secure {
    static final String USER = "tester";
    static final String INTRUDER = "intruder";
    /** The Kerberized HDFS client settings every Configuration of this JVM reads (YARN). */
    private static final String SECURE_DEFAULTS = "sandbox-secure-site.xml";
    private static final String STORE_PASSWORD = "sandbox-store";

    private final MiniKdc kdc;
    private final File dir;
    private final File serviceKeytab;
    private final File userKeytab;
    private final File intruderKeytab;
    private final File caPem;
    private final long tokenLifetimeMs;

    private Secure(MiniKdc kdc, File dir, long tokenLifetimeMs) {
      this.kdc = kdc;
      this.dir = dir;
      this.serviceKeytab = new File(dir, "hdfs.keytab");
      this.userKeytab = new File(dir, "user.keytab");
      this.intruderKeytab = new File(dir, "intruder.keytab");
      this.caPem = new File(dir, "ca.pem");
      this.tokenLifetimeMs = tokenLifetimeMs;
    }

    static Secure start(File base, long tokenLifetimeMs) throws Exception {
      File dir = new File(base, "secure");
      File kdcDir = new File(dir, "kdc");
      if (!kdcDir.isDirectory() && !kdcDir.mkdirs()) {
        throw new IOException("cannot create " + kdcDir);
      }
      Properties kdcConf = MiniKdc.createConf();
      kdcConf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "localhost");
      MiniKdc kdc = new MiniKdc(kdcConf, kdcDir);
      // start() writes krb5.conf and points java.security.krb5.conf at it, before UGI reads it.
      kdc.start();
      Secure secure = new Secure(kdc, dir, tokenLifetimeMs);
      kdc.createPrincipal(
          secure.serviceKeytab, "hdfs/localhost", "HTTP/localhost", "HTTP/127.0.0.1");
      kdc.createPrincipal(secure.userKeytab, USER);
      kdc.createPrincipal(secure.intruderKeytab, INTRUDER);
      secure.makeStores(new File(base, "sslconf"));
      secure.writeClientKrb5Conf();
      return secure;
    }

    /**
     * The clients' krb5.conf: MiniKdc's, without DNS (loopback only here) and without turning
     * 127.0.0.1 into a host name, so a client asks for the service principal of the name it was
     * given (both exist).
     */
    private void writeClientKrb5Conf() throws IOException {
      String text = "[libdefaults]\n"
          + "    default_realm = " + kdc.getRealm() + "\n"
          + "    udp_preference_limit = 1\n"
          + "    dns_lookup_kdc = false\n"
          + "    dns_lookup_realm = false\n"
          + "    dns_canonicalize_hostname = false\n"
          + "    rdns = false\n"
          + "\n[realms]\n"
          + "    " + kdc.getRealm() + " = {\n"
          + "        kdc = localhost:" + kdc.getPort() + "\n"
          + "    }\n";
      java.nio.file.Files.write(clientKrb5Conf().toPath(), text.getBytes(StandardCharsets.UTF_8));
    }

    File clientKrb5Conf() {
      return new File(dir, "krb5.conf");
    }

    String principal(String name) {
      return name + "@" + kdc.getRealm();
    }

    void configure(Configuration conf) throws IOException {
      String service = principal("hdfs/localhost");
      conf.set("hadoop.security.authentication", "kerberos");
      conf.set("dfs.namenode.kerberos.principal", service);
      conf.set("dfs.namenode.keytab.file", serviceKeytab.getPath());
      conf.set("dfs.datanode.kerberos.principal", service);
      conf.set("dfs.datanode.keytab.file", serviceKeytab.getPath());
      // "*": every HTTP/ principal of the keytab, so SPNEGO works for localhost and 127.0.0.1.
      conf.set("dfs.web.authentication.kerberos.principal", "*");
      conf.set("dfs.web.authentication.kerberos.keytab", serviceKeytab.getPath());
      // WebHDFS's filter reads hadoop.http.authentication.*: without these it is "simple" and
      // takes any user.name= as the caller.
      conf.set("hadoop.http.authentication.type", "kerberos");
      conf.set("hadoop.http.authentication.simple.anonymous.allowed", "false");
      conf.set("hadoop.http.authentication.kerberos.principal", "*");
      conf.set("hadoop.http.authentication.kerberos.keytab", serviceKeytab.getPath());
      conf.setBoolean("dfs.block.access.token.enable", true);
      // SASL on the DataNodes' port instead of privileged ports (which need root and jsvc).
      conf.set("dfs.data.transfer.protection", "authentication");
      conf.set("dfs.http.policy", "HTTPS_ONLY");
      conf.set("dfs.namenode.https-address", "127.0.0.1:0");
      conf.set("dfs.datanode.https.address", "127.0.0.1:0");
      conf.setInt("ipc.client.connect.max.retries.on.sasl", 10);
      if (tokenLifetimeMs > 0) {
        conf.setLong("dfs.namenode.delegation.token.max-lifetime", tokenLifetimeMs);
        conf.setLong("dfs.namenode.delegation.token.renew-interval", tokenLifetimeMs);
      }
      UserGroupInformation.setConfiguration(conf);
      UserGroupInformation.loginUserFromKeytab(service, serviceKeytab.getPath());
    }

    /**
     * Kerberos for the ResourceManager and NodeManagers of {@code --yarn}. They log in with
     * the service principal of the NameNode and DataNodes: a JVM has one Kerberos login, and a
     * daemon logging in as another principal would replace the one the NameNode answers with.
     * That login is the HDFS delegation tokens' renewer (the short name {@code hdfs}), so the
     * ResourceManager renews the tokens an application brings. The HDFS client settings let it
     * and the NodeManagers (localization) reach the Kerberized HDFS.
     */
    void configureYarn(Configuration conf, File classpathDir) throws IOException {
      String service = principal("hdfs/localhost");
      String http = principal("HTTP/localhost");
      Configuration client = new Configuration(false);
      client.set("hadoop.security.authentication", "kerberos");
      client.set("dfs.namenode.kerberos.principal", service);
      client.set("dfs.datanode.kerberos.principal", service);
      client.set("dfs.data.transfer.protection", "authentication");
      client.setBoolean("dfs.block.access.token.enable", true);
      client.set("dfs.http.policy", "HTTPS_ONLY");
      for (Map.Entry<String, String> entry : client) {
        conf.set(entry.getKey(), entry.getValue());
      }
      // The NodeManagers' localizers read HDFS with a Configuration of their own (the
      // classpath's defaults, not the NodeManager's): the same client settings as a default
      // resource, or their reads skip the DataNodes' SASL handshake and fail.
      writeXml(client, new File(classpathDir, SECURE_DEFAULTS));
      Configuration.addDefaultResource(SECURE_DEFAULTS);
      conf.set(YarnConfiguration.RM_PRINCIPAL, service);
      conf.set(YarnConfiguration.RM_KEYTAB, serviceKeytab.getPath());
      conf.set(YarnConfiguration.NM_PRINCIPAL, service);
      conf.set(YarnConfiguration.NM_KEYTAB, serviceKeytab.getPath());
      conf.set(YarnConfiguration.RM_WEBAPP_SPNEGO_USER_NAME_KEY, http);
      conf.set(YarnConfiguration.RM_WEBAPP_SPNEGO_KEYTAB_FILE_KEY, serviceKeytab.getPath());
      conf.set(YarnConfiguration.NM_WEBAPP_SPNEGO_USER_NAME_KEY, http);
      conf.set(YarnConfiguration.NM_WEBAPP_SPNEGO_KEYTAB_FILE_KEY, serviceKeytab.getPath());
    }

    /** What clients need beside the addresses: Kerberos, SASL data transfer, HTTPS. */
    void clientConf(Configuration core, Configuration hdfs) {
      core.set("hadoop.security.authentication", "kerberos");
      hdfs.set("dfs.namenode.kerberos.principal", principal("hdfs/localhost"));
      hdfs.set("dfs.datanode.kerberos.principal", principal("hdfs/localhost"));
      hdfs.set("dfs.data.transfer.protection", "authentication");
      hdfs.set("dfs.http.policy", "HTTPS_ONLY");
      hdfs.setBoolean("dfs.block.access.token.enable", true);
    }

    /** A CA, the servers' keystore signed by it (localhost and 127.0.0.1), a truststore. */
    private void makeStores(File sslConf) throws Exception {
      File ca = new File(dir, "ca.p12");
      File server = new File(dir, "server.p12");
      File trust = new File(dir, "truststore.p12");
      File csr = new File(dir, "server.csr");
      File cert = new File(dir, "server.pem");
      for (File f : new File[] {ca, server, trust, csr, cert, caPem}) {
        f.delete();
      }
      keytool("-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048",
          "-dname", "CN=hdfs-region sandbox CA", "-ext", "bc:c", "-validity", "365",
          "-keystore", ca.getPath());
      keytool("-exportcert", "-rfc", "-alias", "ca", "-keystore", ca.getPath(),
          "-file", caPem.getPath());
      keytool("-genkeypair", "-alias", "server", "-keyalg", "RSA", "-keysize", "2048",
          "-dname", "CN=localhost", "-validity", "365", "-keystore", server.getPath());
      keytool("-certreq", "-alias", "server", "-keystore", server.getPath(),
          "-file", csr.getPath());
      keytool("-gencert", "-rfc", "-alias", "ca", "-keystore", ca.getPath(),
          "-infile", csr.getPath(), "-outfile", cert.getPath(), "-validity", "365",
          "-ext", "SAN=dns:localhost,ip:127.0.0.1", "-ext", "EKU=serverAuth");
      keytool("-importcert", "-noprompt", "-alias", "ca", "-file", caPem.getPath(),
          "-keystore", server.getPath());
      keytool("-importcert", "-noprompt", "-alias", "server", "-file", cert.getPath(),
          "-keystore", server.getPath());
      keytool("-importcert", "-noprompt", "-alias", "ca", "-file", caPem.getPath(),
          "-keystore", trust.getPath());
      // Hadoop reads ssl-server.xml / ssl-client.xml from the classpath: the launcher puts
      // this directory on it.
      if (!sslConf.isDirectory() && !sslConf.mkdirs()) {
        throw new IOException("cannot create " + sslConf);
      }
      Configuration sslServer = new Configuration(false);
      sslServer.set("ssl.server.keystore.location", server.getPath());
      sslServer.set("ssl.server.keystore.type", "pkcs12");
      sslServer.set("ssl.server.keystore.password", STORE_PASSWORD);
      sslServer.set("ssl.server.keystore.keypassword", STORE_PASSWORD);
      sslServer.set("ssl.server.truststore.location", trust.getPath());
      sslServer.set("ssl.server.truststore.type", "pkcs12");
      sslServer.set("ssl.server.truststore.password", STORE_PASSWORD);
      writeXml(sslServer, new File(sslConf, "ssl-server.xml"));
      Configuration sslClient = new Configuration(false);
      sslClient.set("ssl.client.truststore.location", trust.getPath());
      sslClient.set("ssl.client.truststore.type", "pkcs12");
      sslClient.set("ssl.client.truststore.password", STORE_PASSWORD);
      writeXml(sslClient, new File(sslConf, "ssl-client.xml"));
    }

    private static void keytool(String... args) throws IOException, InterruptedException {
      List<String> cmd = new ArrayList<>();
      cmd.add(new File(System.getProperty("java.home"), "bin/keytool").getPath());
      cmd.addAll(List.of(args));
      cmd.addAll(List.of("-storetype", "pkcs12", "-storepass", STORE_PASSWORD));
      Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
      String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      if (p.waitFor() != 0) {
        throw new IOException("keytool " + args[0] + " failed: " + output.trim());
      }
    }

    String json() {
      return ", \"secure\": true"
          + ", \"realm\": " + quote(kdc.getRealm())
          + ", \"krb5_conf\": " + quote(clientKrb5Conf().getAbsolutePath())
          + ", \"kdc_port\": " + kdc.getPort()
          + ", \"principal\": " + quote(principal(USER))
          + ", \"keytab\": " + quote(userKeytab.getAbsolutePath())
          + ", \"intruder_principal\": " + quote(principal(INTRUDER))
          + ", \"intruder_keytab\": " + quote(intruderKeytab.getAbsolutePath())
          + ", \"service_principal\": " + quote(principal("hdfs/localhost"))
          + ", \"ca_file\": " + quote(caPem.getAbsolutePath());
    }

    void stop() {
      kdc.stop();
    }
  }

  /**
   * The YARN side of {@code --yarn}: a ResourceManager and NodeManagers (MiniYARNCluster) in this
   * JVM, sized for a small machine. Containers run as processes of this user on this host
   * (DefaultContainerExecutor); their logs and working directories are under {@code
   * BASE_DIR/yarn}. Memory is what YARN schedules (AM and executors), not what the host holds:
   * the memory checks (physical and virtual) are off, as a Python worker beside an executor's
   * JVM would otherwise get the container killed on a busy test machine.
   */
  static final class Yarn {
    /** Memory each NodeManager offers: an application master and two small executors fit. */
    static final int NODE_MEMORY_MB = 3072;

    private final MiniYARNCluster cluster;
    private final NodeManager[] nodeManagers;
    private final boolean[] stopped;

    private Yarn(MiniYARNCluster cluster, int count) {
      this.cluster = cluster;
      this.nodeManagers = new NodeManager[count];
      this.stopped = new boolean[count];
      for (int i = 0; i < count; i++) {
        nodeManagers[i] = cluster.getNodeManager(i);
      }
    }

    static Yarn start(File base, int count, String defaultFs, Secure secure) throws Exception {
      File dir = new File(base, "yarn");
      if (!dir.isDirectory() && !dir.mkdirs()) {
        throw new IOException("cannot create " + dir);
      }
      // MiniYARNCluster's working directory is under test.build.data (default: ./target).
      System.setProperty("test.build.data", dir.getPath());
      YarnConfiguration conf = new YarnConfiguration();
      conf.set("fs.defaultFS", defaultFs);
      if (secure != null) {
        secure.configureYarn(conf, new File(base, "sslconf"));
      }
      conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
      conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, NODE_MEMORY_MB);
      conf.setInt(YarnConfiguration.NM_PMEM_MB, NODE_MEMORY_MB);
      conf.setInt(YarnConfiguration.NM_VCORES, 4);
      conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
      conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
      // A full test disk must not turn every NodeManager unhealthy (no container would start).
      conf.setFloat(
          YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
      // Containers find Java where this JVM runs (JAVA_HOME may be unset in the environment).
      conf.set(
          YarnConfiguration.NM_ADMIN_USER_ENV,
          "MALLOC_ARENA_MAX=$MALLOC_ARENA_MAX,JAVA_HOME=" + System.getProperty("java.home"));
      conf.setFloat("yarn.scheduler.capacity.maximum-am-resource-percent", 0.5f);
      // A lost NodeManager is noticed in seconds, and an application's logs stay for reading.
      conf.setLong(YarnConfiguration.RM_NM_EXPIRY_INTERVAL_MS, 10_000);
      conf.setLong(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, 500);
      conf.setLong(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 600);
      conf.setBoolean(YarnConfiguration.TIMELINE_SERVICE_ENABLED, false);
      // A NodeManager's stop waits this (and a second) for its containers to end: the sandbox's
      // shutdown stays within its bound.
      conf.setLong(YarnConfiguration.NM_PROCESS_KILL_WAIT_MS, 1000);
      // The NodeManagers' local filesystem sets permissions in this JVM ({@link LocalChmodFs}):
      // Hadoop's, without its native library, forks a chmod process for each file.
      conf.set("fs.AbstractFileSystem.file.impl", LocalChmodFs.class.getName());
      MiniYARNCluster cluster = new MiniYARNCluster("sandbox", count, 1, 1);
      cluster.init(conf);
      cluster.start();
      if (!cluster.waitForNodeManagersToConnect(60_000)) {
        throw new IOException("the NodeManagers did not register within 60 s");
      }
      return new Yarn(cluster, count);
    }

    String rmAddress() {
      return cluster.getConfig().get(YarnConfiguration.RM_ADDRESS);
    }

    /** The addresses a client (spark-submit, the AM) needs: yarn-site.xml of conf_dir. */
    Configuration clientConf() {
      Configuration rm = cluster.getResourceManager().getConfig();
      Configuration out = new Configuration(false);
      for (String key :
          new String[] {
            YarnConfiguration.RM_ADDRESS,
            YarnConfiguration.RM_SCHEDULER_ADDRESS,
            YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS,
            YarnConfiguration.RM_ADMIN_ADDRESS,
            YarnConfiguration.RM_WEBAPP_ADDRESS,
          }) {
        out.set(key, rm.get(key));
      }
      out.set(YarnConfiguration.RM_HOSTNAME, rm.get(YarnConfiguration.RM_ADDRESS).split(":")[0]);
      out.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
      out.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, NODE_MEMORY_MB);
      String principal = rm.get(YarnConfiguration.RM_PRINCIPAL);
      if (principal != null) {
        // A client authenticates the ResourceManager by it, and asks HDFS delegation tokens
        // renewable by it.
        out.set(YarnConfiguration.RM_PRINCIPAL, principal);
      }
      return out;
    }

    void stopNodeManager(int index) throws InterruptedException {
      check(index);
      if (stopped[index]) {
        throw new IllegalStateException("nodemanager " + index + " is already stopped");
      }
      org.apache.hadoop.yarn.api.records.NodeId id =
          nodeManagers[index].getNMContext().getNodeId();
      nodeManagers[index].stop();
      stopped[index] = true;
      unregister(id);
      // Answered once the ResourceManager has taken the node out (its unregistration is an
      // event handled after the NodeManager's stop returns).
      while (isRunning(id)) {
        Thread.sleep(100); // an interrupt (the command timed out) ends the wait
      }
    }

    /**
     * What a NodeManager's stop tells the ResourceManager, for one of MiniYARNCluster's own: they
     * reach the ResourceManager in-process, and there their unregistration is a no-op, so that
     * the ResourceManager learned of a stopped one only when its liveness expired (10 s later).
     * A NodeManager started again ({@link #startNodeManager}) unregisters over RPC by itself.
     */
    private void unregister(org.apache.hadoop.yarn.api.records.NodeId id) {
      if (!isRunning(id)) {
        return;
      }
      try {
        cluster
            .getResourceManager()
            .getResourceTrackerService()
            .unRegisterNodeManager(
                org.apache.hadoop.yarn.server.api.protocolrecords.UnRegisterNodeManagerRequest
                    .newInstance(id));
      } catch (Exception e) {
        // The liveness expiry still takes the node out.
        System.err.println("sandbox: unregistering " + id + ": " + e);
      }
    }

    private boolean isRunning(org.apache.hadoop.yarn.api.records.NodeId id) {
      org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode node =
          cluster.getResourceManager().getRMContext().getRMNodes().get(id);
      return node != null
          && node.getState() == org.apache.hadoop.yarn.api.records.NodeState.RUNNING;
    }

    /** A new NodeManager in place of a stopped one (a service does not start twice): same
     * directories, new ports, so the ResourceManager sees a new node. */
    void startNodeManager(int index) throws Exception {
      check(index);
      if (!stopped[index]) {
        throw new IllegalStateException("nodemanager " + index + " is not stopped");
      }
      YarnConfiguration conf = new YarnConfiguration(nodeManagers[index].getConfig());
      String host = MiniYARNCluster.getHostname();
      for (String key :
          new String[] {
            YarnConfiguration.NM_ADDRESS,
            YarnConfiguration.NM_LOCALIZER_ADDRESS,
            YarnConfiguration.NM_WEBAPP_ADDRESS,
            YarnConfiguration.NM_COLLECTOR_SERVICE_ADDRESS,
          }) {
        conf.set(key, host + ":0");
      }
      // MiniYARNCluster's own NodeManagers reach the ResourceManager in-process; this one
      // registers over RPC, at the addresses the ResourceManager bound.
      Configuration rm = clientConf();
      for (Map.Entry<String, String> entry : rm) {
        conf.set(entry.getKey(), entry.getValue());
      }
      NodeManager nm = new NodeManager();
      nm.init(conf);
      nm.start();
      nodeManagers[index] = nm;
      stopped[index] = false;
      long deadline = System.currentTimeMillis() + 60_000;
      while (nm.getNMContext().getNodeId() == null || !isRunning(nm.getNMContext().getNodeId())) {
        if (System.currentTimeMillis() > deadline) {
          throw new IOException("nodemanager " + index + " did not register within 60 s");
        }
        Thread.sleep(100);
      }
    }

    private void check(int index) {
      if (index < 0 || index >= nodeManagers.length) {
        throw new IllegalArgumentException(
            "no nodemanager " + index + " (there are " + nodeManagers.length + ")");
      }
    }

    /** NodeManagers the ResourceManager counts as running (a stopped one leaves at once). */
    int running() {
      int count = 0;
      for (org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode node :
          cluster.getResourceManager().getRMContext().getRMNodes().values()) {
        if (node.getState() == org.apache.hadoop.yarn.api.records.NodeState.RUNNING) {
          count++;
        }
      }
      return count;
    }

    String json() {
      return ", \"yarn\": " + quote(rmAddress())
          + ", \"nodemanagers\": " + nodeManagers.length;
    }

    /**
     * The NodeManagers stopped together (a NodeManager that ran an application waits 3 s for its
     * containers, then 10 s for its log deleter's scheduled deletions), then the rest.
     */
    void stop() throws InterruptedException {
      List<Thread> stopping = new ArrayList<>();
      for (int i = 0; i < nodeManagers.length; i++) {
        if (!stopped[i]) {
          NodeManager nm = nodeManagers[i];
          org.apache.hadoop.yarn.api.records.NodeId id = nm.getNMContext().getNodeId();
          Thread t =
              new Thread(
                  () -> {
                    nm.stop();
                    unregister(id);
                  },
                  "stop-nodemanager-" + i);
          t.setDaemon(true);
          t.start();
          stopping.add(t);
        }
      }
      for (Thread t : stopping) {
        t.join();
      }
      cluster.stop();
    }
  }

  /**
   * Hadoop's local filesystem of {@code FileContext} (checksums over the raw local filesystem)
   * whose permissions are set by {@code java.nio} in this JVM. Without Hadoop's native library
   * its own forks a {@code chmod} process for each call, and a NodeManager's localizer sets the
   * permissions of every file of an archive it unpacks: a packed Python environment of 9,000
   * files took a minute per NodeManager on 2 cores, before any container of the application
   * started. Permissions a mode set cannot hold (sticky, setuid, setgid) go the forked way.
   */
  public static final class LocalChmodFs extends ChecksumFs {
    public LocalChmodFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new RawLocalChmodFs(uri, conf));
    }
  }

  /** {@code RawLocalFs} (whose constructors are not public) over {@link LocalChmodFileSystem}. */
  static final class RawLocalChmodFs extends DelegateToFileSystem {
    RawLocalChmodFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new LocalChmodFileSystem(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1; // no port for file:///
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true; // any local name
    }
  }

  /** The raw local filesystem, its {@code setPermission} by {@code java.nio}. */
  static final class LocalChmodFileSystem extends RawLocalFileSystem {
    private static final PosixFilePermission[] BITS = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
      PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
      PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
      PosixFilePermission.OWNER_READ,
    };

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      int mode = permission.toShort() & 07777;
      if (mode > 0777) {
        super.setPermission(p, permission);
        return;
      }
      EnumSet<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
      for (int bit = 0; bit < BITS.length; bit++) {
        if ((mode & (1 << bit)) != 0) {
          set.add(BITS[bit]);
        }
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), set);
    }
  }

  private static String quoteList(List<String> values) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < values.size(); i++) {
      if (i > 0) {
        b.append(", ");
      }
      b.append(quote(values.get(i)));
    }
    return b.append("]").toString();
  }

  private static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }
}
