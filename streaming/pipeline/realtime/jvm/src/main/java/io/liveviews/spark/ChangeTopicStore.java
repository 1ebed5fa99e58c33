package io.liveviews.spark;

import java.net.URI;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Function;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisPool;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * The writer's connections to the store: one pool per store per JVM, so the writers of every
 * epoch reuse warm connections instead of connecting at each checkpoint. Calls are retried
 * through a store out of reach, and through a store that refuses writes for now (out of memory,
 * a disk full, too few replicas), for OUTAGE_MS, as the micro-batch sink does
 * (liveviews.store.client.retrying): every call the writer makes is idempotent.
 */
final class ChangeTopicStore {
  private static final Logger LOG = LoggerFactory.getLogger(ChangeTopicStore.class);
  private static final ConcurrentHashMap<String, JedisPool> POOLS = new ConcurrentHashMap<>();
  static final long OUTAGE_MS = 30_000;
  private static final String[] REFUSALS = {"OOM", "MISCONF", "NOREPLICAS", "READONLY", "LOADING"};

  private final String url;
  private final String script;
  private String sha;

  ChangeTopicStore(String url, String script) {
    this.url = url;
    this.script = script;
  }

  private JedisPool pool() {
    return POOLS.computeIfAbsent(url, u -> new JedisPool(URI.create(u)));
  }

  /** {@code call} on a pooled connection, again after a pause while the store is unavailable. */
  <T> T run(String what, Function<Jedis, T> call) {
    long deadline = System.currentTimeMillis() + OUTAGE_MS;
    long pause = 50;
    while (true) {
      try (Jedis jedis = pool().getResource()) {
        return call.apply(jedis);
      } catch (JedisConnectionException | JedisDataException e) {
        if (e instanceof JedisDataException && !refused(e.getMessage())) {
          throw e;
        }
        if (System.currentTimeMillis() + pause > deadline) {
          throw new IllegalStateException(
              "the store at " + redact(url) + " did not take the change topic's writes for "
                  + (OUTAGE_MS / 1000) + " s while " + what + ": " + e.getMessage(), e);
        }
        LOG.warn("store unavailable while {} ({}); trying again", what, e.getMessage());
        sleep(pause);
        pause = Math.min(2000, pause * 2);
      }
    }
  }

  /** sink.lua on {@code jedis}, loading it first if the store does not have it (a restart). */
  Object apply(Jedis jedis, List<String> keys, List<String> args) {
    if (sha == null) {
      sha = jedis.scriptLoad(script);
    }
    try {
      return jedis.evalsha(sha, keys, args);
    } catch (JedisDataException e) {
      if (e.getMessage() == null || !e.getMessage().startsWith("NOSCRIPT")) {
        throw e;
      }
      sha = jedis.scriptLoad(script);
      return jedis.evalsha(sha, keys, args);
    }
  }

  private static boolean refused(String message) {
    if (message == null) {
      return false;
    }
    for (String code : REFUSALS) {
      if (message.startsWith(code)) {
        return true;
      }
    }
    return message.contains("OutOfMemoryError");
  }

  private static String redact(String url) {
    return url.replaceAll("//[^@/]*@", "//");
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while waiting for the store", e);
    }
  }
}
