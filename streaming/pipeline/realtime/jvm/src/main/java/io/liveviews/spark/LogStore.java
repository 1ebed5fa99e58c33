package io.liveviews.spark;

import java.net.URI;
import java.util.function.Function;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * One connection to the store, opened at its first read: each input partition's reader and
 * the driver's stream have their own, so a blocking read of one holds back no other.
 *
 * <p>Reads are retried through a store out of reach (restarting, still loading its data) for
 * OUTAGE_MS, 50 ms doubling to 2 s between tries, as the Python source does
 * ({@code liveviews.pipeline.source.store_retry}): a restarted store is a pause of the query,
 * not a failed query. Every read is safe to repeat.
 */
final class LogStore implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(LogStore.class);
  static final long OUTAGE_MS = 60_000;
  private static final String[] PASSING = {"LOADING", "TRYAGAIN", "MASTERDOWN"};

  private final String url;
  private Jedis jedis;

  LogStore(String url) {
    this.url = url;
  }

  /** {@code read} on the connection, reconnecting after a pause while the store is away. */
  <T> T read(String what, Function<Jedis, T> read) {
    long deadline = System.currentTimeMillis() + OUTAGE_MS;
    long pause = 50;
    while (true) {
      try {
        if (jedis == null) {
          jedis = new Jedis(URI.create(url));
        }
        return read.apply(jedis);
      } catch (JedisConnectionException | JedisDataException e) {
        close();  // a connection broken mid-transaction is not used again
        if (e instanceof JedisDataException && !passing(e.getMessage())) {
          throw e;
        }
        if (System.currentTimeMillis() + pause > deadline) {
          throw new IllegalStateException("the store at " + where() + " could not be read for "
              + OUTAGE_MS / 1000 + " s while " + what + ": " + e.getMessage(), e);
        }
        LOG.warn("the store at {} is unavailable while {} ({}); trying again in {} ms",
            where(), what, e.getMessage(), pause);
        sleep(pause);
        pause = Math.min(2000, pause * 2);
      }
    }
  }

  private static boolean passing(String message) {
    for (String prefix : PASSING) {
      if (message != null && message.startsWith(prefix)) {
        return true;
      }
    }
    return false;
  }

  /** The store's host and port: never its password. */
  private String where() {
    URI uri = URI.create(url);
    return uri.getHost() + ":" + uri.getPort();
  }

  static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while waiting for the store", e);
    }
  }

  @Override
  public void close() {
    if (jedis != null) {
      try {
        jedis.close();
      } catch (RuntimeException e) {
        LOG.debug("closing a broken connection to {}: {}", where(), e.getMessage());
      }
      jedis = null;
    }
  }
}
