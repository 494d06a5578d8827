package hdfsregion;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.hdfs.server.namenode.NameNode;
import sun.misc.Signal;

/**
 * A real HDFS (Hadoop's MiniDFSCluster: NameNode and DataNodes in this JVM) for trying, testing
 * and benchmarking hdfs-region.
 *
 * <p>Arguments: {@code BASE_DIR [--datanodes N] [--ha]}. Ports are ephemeral. When the cluster is
 * up, the first line on stdout is one JSON object with its URIs and the client configuration
 * directory it wrote; each later line answers one command read from stdin:
 *
 * <pre>
 *   stop-datanode I | start-datanode I | restart-datanode I | restart-namenode [I] | status
 * </pre>
 *
 * End of stdin leaves the cluster running; SIGINT / SIGTERM shut it down cleanly (exit 0). Everything
 * Hadoop logs goes to the log file set by the caller's log4j configuration, never to stdout.
 */
public final class Sandbox {
  private static final String NAMESERVICE = "sandbox";

  private final MiniDFSCluster cluster;
  private final boolean ha;
  private final PrintStream out;
  private final Map<Integer, MiniDFSCluster.DataNodeProperties> stopped = new HashMap<>();

  private Sandbox(MiniDFSCluster cluster, boolean ha, PrintStream out) {
    this.cluster = cluster;
    this.ha = ha;
    this.out = out;
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
    for (int i = 1; i < args.length; i++) {
      if (args[i].equals("--datanodes") && i + 1 < args.length) {
        datanodes = Integer.parseInt(args[++i]);
      } else if (args[i].equals("--ha")) {
        ha = true;
      } else {
        System.err.println("unknown argument: " + args[i]);
        System.exit(2);
      }
    }
    long started = System.nanoTime();
    MiniDFSCluster cluster = start(base, datanodes, ha);
    Sandbox sandbox = new Sandbox(cluster, ha, out);
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
    sandbox.shutdown();
    System.exit(0);
  }

  private static MiniDFSCluster start(File base, int datanodes, boolean ha) throws IOException {
    Configuration conf = new HdfsConfiguration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(base, "data").getPath());
    conf.setInt("dfs.replication", Math.min(datanodes, 3));
    conf.setBoolean("dfs.permissions.enabled", true);
    // A dead DataNode is noticed in seconds, not the default 10 minutes.
    conf.setInt("dfs.namenode.heartbeat.recheck-interval", 3000);
    conf.setInt("dfs.heartbeat.interval", 1);
    // Blocks of 1 MiB (the minimum): truncates and appends cross block boundaries at test sizes.
    conf.setLong("dfs.blocksize", 1024 * 1024);
    boolean reuse = new File(base, "data/name1").isDirectory();
    MiniDFSCluster.Builder builder =
        new MiniDFSCluster.Builder(conf).numDataNodes(datanodes).format(!reuse);
    if (ha) {
      builder.nnTopology(MiniDFSNNTopology.simpleHATopology(2));
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
      out.add("127.0.0.1:" + nn.getHttpAddress().getPort());
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

  /** core-site.xml and hdfs-site.xml for clients (HADOOP_CONF_DIR). */
  private File writeClientConf(File dir) throws IOException {
    if (!dir.isDirectory() && !dir.mkdirs()) {
      throw new IOException("cannot create " + dir);
    }
    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", hdfsUri());
    Configuration hdfs = new Configuration(false);
    hdfs.set("dfs.replication", cluster.getConfiguration(0).get("dfs.replication"));
    List<String> rpc = rpcAddresses();
    List<String> http = httpAddresses();
    if (ha) {
      hdfs.set("dfs.nameservices", NAMESERVICE);
      List<String> ids = new ArrayList<>();
      for (int i = 0; i < rpc.size(); i++) {
        String id = "nn" + i;
        ids.add(id);
        hdfs.set("dfs.namenode.rpc-address." + NAMESERVICE + "." + id, rpc.get(i));
        hdfs.set("dfs.namenode.http-address." + NAMESERVICE + "." + id, http.get(i));
      }
      hdfs.set("dfs.ha.namenodes." + NAMESERVICE, String.join(",", ids));
      hdfs.set(
          "dfs.client.failover.proxy.provider." + NAMESERVICE,
          "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
    } else {
      hdfs.set("dfs.namenode.rpc-address", rpc.get(0));
      hdfs.set("dfs.namenode.http-address", http.get(0));
    }
    writeXml(core, new File(dir, "core-site.xml"));
    writeXml(hdfs, new File(dir, "hdfs-site.xml"));
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
    StringBuilder webhdfs = new StringBuilder("webhdfs://");
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
        String detail = run(words);
        out.println("{\"ok\": true, \"command\": " + quote(line) + detail + "}");
      } catch (Exception e) {
        System.err.println("sandbox: " + line + " failed: " + e);
        out.println("{\"ok\": false, \"command\": " + quote(line) + ", \"error\": "
            + quote(e.getClass().getSimpleName() + ": " + e.getMessage()) + "}");
      }
    }
  }

  private static String readLine(BufferedReader in) {
    try {
      return in.readLine();
    } catch (IOException e) {
      return null;
    }
  }

  private synchronized String run(String[] words) throws Exception {
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
      case "restart-datanode":
        cluster.restartDataNode(index, true);
        cluster.waitActive();
        return "";
      case "restart-namenode":
        // Same ports: clients reconnect to the address they know.
        cluster.restartNameNode(index, true);
        if (ha) {
          cluster.transitionToActive(index);
        }
        cluster.waitActive();
        return "";
      case "status":
        return ", \"datanodes\": " + cluster.getDataNodes().size()
            + ", \"http\": " + quoteList(httpAddresses())
            + ", \"namenodes\": " + quoteList(rpcAddresses());
      default:
        throw new IllegalArgumentException("unknown command " + cmd);
    }
  }

  private synchronized void shutdown() {
    System.err.println("sandbox: shutting down");
    try {
      FileSystem.closeAll();
    } catch (IOException e) {
      System.err.println("sandbox: closing clients: " + e);
    }
    cluster.shutdown(false, false);
    System.err.println("sandbox: stopped");
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
