import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * A bulk writer and a last-message waiter, for timing a broker's rebuild of its queues (redispatch.py).
 *
 *   send     NAMESRV BROKER_ADDR BYTES [TOPICS QUEUES BATCH SIZE THREADS]
 *            batches of BATCH messages of about SIZE bytes (keys "b<i>", tags "t<i%8>") over TOPICS topics
 *            BULK0.. of QUEUES queues each, from THREADS sending threads, until BYTES of bodies are stored;
 *            then, once every batch is acknowledged, one last message alone (so it is the log's last), and
 *            one JSON line on stdout: its topic, queueId, queueOffset, msgId, offsetMsgId and the totals.
 *   waitlast NAMESRV TOPIC QUEUE_ID QUEUE_OFFSET [TIMEOUT_S]
 *            pulls that queue at that offset until the message is there (the broker may not be up yet);
 *            one JSON line: elapsed ms since this JVM's main began, the wall-clock ms it was found, tries;
 *            then halts at once (no client shutdown).
 */
public class Bulk {
    static final long T0 = System.currentTimeMillis();

    public static void main(String[] args) throws Exception {
        int rc;
        if (args[0].equals("send")) {
            rc = send(args);
        } else if (args[0].equals("waitlast")) {
            rc = waitLast(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]),
                          args.length > 5 ? Long.parseLong(args[5]) : 3600);
        } else {
            throw new IllegalArgumentException("mode " + args[0]);
        }
        System.out.flush();
        System.exit(rc);
    }

    static void log(String what) {
        System.err.println(String.format("%7.1f s  %s", (System.currentTimeMillis() - T0) / 1000.0, what));
    }

    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static int send(String[] a) throws Exception {
        String namesrv = a[1], brokerAddr = a[2];
        long target = Long.parseLong(a[3]);
        int topics = a.length > 4 ? Integer.parseInt(a[4]) : 4;
        int queues = a.length > 5 ? Integer.parseInt(a[5]) : 8;
        int batch = a.length > 6 ? Integer.parseInt(a[6]) : 64;
        int size = a.length > 7 ? Integer.parseInt(a[7]) : 16384;
        int threads = a.length > 8 ? Integer.parseInt(a[8]) : 4;

        DefaultMQAdminExt admin = new DefaultMQAdminExt("rocketidx-bulk-admin");
        admin.setNamesrvAddr(namesrv);
        admin.start();
        for (int t = 0; t < topics; t++) {
            admin.createAndUpdateTopicConfig(brokerAddr, new TopicConfig("BULK" + t, queues, queues, 6));
        }
        List<String> created = new ArrayList<>();
        for (int t = 0; t < topics; t++) created.add("BULK" + t);
        Workload.awaitRoutes(admin, created);
        admin.shutdown();

        DefaultMQProducer producer = new DefaultMQProducer("rocketidx-bulk");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(30000);
        producer.setRetryTimesWhenSendFailed(0);  // retried here, with a pause: the broker says busy under load
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.setMaxMessageSize(4 * 1024 * 1024);
        producer.start();

        // Bodies are windows of one random pool, each stamped with its number: distinct, incompressible.
        byte[] pool = new byte[8 << 20];
        new Random(32).nextBytes(pool);
        AtomicLong nextBatch = new AtomicLong(), bytes = new AtomicLong(), msgs = new AtomicLong();
        AtomicLong retries = new AtomicLong(), lastLog = new AtomicLong(T0);
        final Exception[] failed = {null};
        List<Thread> workers = new ArrayList<>();
        for (int w = 0; w < threads; w++) {
            Thread th = new Thread(() -> {
                try {
                    while (bytes.get() < target && failed[0] == null) {
                        long b = nextBatch.getAndIncrement();
                        String topic = "BULK" + (b % topics);
                        List<Message> list = new ArrayList<>(batch);
                        long sz = 0;
                        for (int j = 0; j < batch; j++) {
                            long i = b * batch + j;
                            int len = size - 512 + (int) (i * 131 % 1024);
                            int from = (int) ((i * 7919L) % (pool.length - len));
                            byte[] body = java.util.Arrays.copyOfRange(pool, from, from + len);
                            for (int k = 0; k < 8; k++) body[k] = (byte) (i >>> (8 * k));
                            Message m = new Message(topic, "t" + (i % 8), "b" + i, body);
                            list.add(m);
                            sz += len;
                        }
                        for (int attempt = 0; ; attempt++) {
                            try {
                                SendResult r = producer.send(list);
                                if (r.getSendStatus() != SendStatus.SEND_OK) log("batch " + b + ": " + r.getSendStatus());
                                break;
                            } catch (Exception e) {
                                if (attempt >= 50) throw e;
                                retries.incrementAndGet();
                                if (retries.get() % 20 == 1) log("retrying batch " + b + ": " + String.valueOf(e).split("\n")[0]);
                                Thread.sleep(200L * Math.min(attempt + 1, 10));
                            }
                        }
                        long total = bytes.addAndGet(sz);
                        msgs.addAndGet(batch);
                        long now = System.currentTimeMillis(), prev = lastLog.get();
                        if (now - prev > 10000 && lastLog.compareAndSet(prev, now)) {
                            log(String.format("%.2f GiB, %d messages, %.1f MB/s", total / 1073741824.0, msgs.get(),
                                              total / 1e6 / ((now - T0) / 1000.0)));
                        }
                    }
                } catch (Exception e) {
                    failed[0] = e;
                }
            });
            th.start();
            workers.add(th);
        }
        for (Thread th : workers) th.join();
        if (failed[0] != null) {
            log("send failed: " + failed[0]);
            producer.shutdown();
            return 2;
        }
        long sendMs = System.currentTimeMillis() - T0;

        // The log's last message: sent alone, after every batch was acknowledged.
        byte[] body = java.util.Arrays.copyOfRange(pool, 0, size);
        Message last = new Message("BULK0", "tlast", "b-last", body);
        SendResult r = null;
        for (int attempt = 0; r == null; attempt++) {
            try { r = producer.send(last); }
            catch (Exception e) { if (attempt >= 50) throw e; Thread.sleep(500); }
        }
        producer.shutdown();
        log(String.format("done: %d messages, %.3f GiB of bodies in %.1f s, %d retries", msgs.get() + 1,
                          bytes.get() / 1073741824.0, sendMs / 1000.0, retries.get()));
        System.out.println("{\"topic\":" + q(r.getMessageQueue().getTopic()) + ",\"queueId\":" + r.getMessageQueue().getQueueId()
            + ",\"queueOffset\":" + r.getQueueOffset() + ",\"msgId\":" + q(r.getMsgId()) + ",\"offsetMsgId\":" + q(r.getOffsetMsgId())
            + ",\"status\":" + q(String.valueOf(r.getSendStatus())) + ",\"messages\":" + (msgs.get() + 1)
            + ",\"body_bytes\":" + (bytes.get() + size) + ",\"send_ms\":" + sendMs + ",\"retries\":" + retries.get() + "}");
        return 0;
    }

    static int waitLast(String namesrv, String topic, int queueId, long offset, long timeoutS) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer("rocketidx-waitlast");
        c.setNamesrvAddr(namesrv);
        c.start();
        MessageQueue mq = new MessageQueue(topic, "broker-a", queueId);
        long end = T0 + timeoutS * 1000;
        int tries = 0;
        String lastState = "";
        while (System.currentTimeMillis() < end) {
            tries++;
            String state;
            try {
                PullResult r = c.pull(mq, "*", offset, 1, 5000);
                if (r.getPullStatus() == PullStatus.FOUND) {
                    for (MessageExt m : r.getMsgFoundList()) {
                        if (m.getQueueOffset() == offset) {
                            long now = System.currentTimeMillis();
                            System.out.println("{\"elapsed_ms\":" + (now - T0) + ",\"found_at_ms\":" + now + ",\"tries\":" + tries
                                + ",\"msgId\":" + q(m.getMsgId()) + ",\"keys\":" + q(m.getKeys())
                                + ",\"phy\":" + m.getCommitLogOffset() + "}");
                            System.out.flush();
                            Runtime.getRuntime().halt(0);  // got it: the client's shutdown (seconds) is no part of the wait
                            return 0;
                        }
                    }
                }
                state = r.getPullStatus() + " next " + r.getNextBeginOffset() + " max " + r.getMaxOffset();
            } catch (Exception e) {
                state = e.getClass().getSimpleName();
            }
            if (!state.equals(lastState)) {
                log("try " + tries + ": " + state);
                lastState = state;
            }
            Thread.sleep(50);
        }
        log("gave up after " + timeoutS + " s");
        c.shutdown();
        return 3;
    }
}
