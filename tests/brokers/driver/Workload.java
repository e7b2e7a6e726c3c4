import java.io.BufferedReader;
import java.io.FileReader;
import java.io.FileWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The broker tests' client, written against the API that RocketMQ 4.9 and 5.x share (anything newer is
 * reached by reflection), so one source compiles against each release's client jar.
 *
 *   send  NAMESRV BROKER_ADDR OUT N SEED [timer] [longgroup] [lmq] [lmqslash]
 *                                                            a workload; one JSON line per message sent; with lmq,
 *                                                            a share of the messages (plain, delayed, transactional,
 *                                                            retried) name light queues in INNER_MULTI_DISPATCH
 *                                                            (lmqslash: one name holds '/', which 5.x clients refuse);
 *                                                            with batchcq (5.x), two queue.type=BatchCQ topics take
 *                                                            batches of 1 to 16 messages and plain sends
 *   read  NAMESRV OUT                                          every queue of every topic, min to max offset
 *   readlmq NAMESRV OUT                                        every light queue a workload with "lmq" names
 *   query NAMESRV IN OUT                                       admin queryMessage for each "topic\tkey\tkind" line
 */
public class Workload {
    static final String[] TOPICS = {"TA", "TB", "TC", "TD", "TE", "TF"};
    static final int[] SIZES = {1, 17, 300, 1500, 4095, 4097, 9000, 40000};
    static PrintWriter out;
    /** The light queues a workload with "lmq" names (the broker writes consumequeue/%LMQ%lqN/0/). */
    static final int LIGHT_QUEUES = 12;
    static final String[] BATCH_TOPICS = {"BQA", "BQB"};
    static boolean lmq, lmqSlash;

    /** One to three light queues for message i, every one of them over a workload; "" for no light queue. */
    static String lightQueues(int i) {
        if (!lmq || i % 3 != 1) return "";
        StringBuilder b = new StringBuilder();
        int n = 1 + (i / 3) % 3;
        for (int j = 0; j < n; j++) b.append(j > 0 ? "," : "").append("%LMQ%lq").append((i / 3 + 5 * j) % LIGHT_QUEUES);
        if (lmqSlash && i % 27 == 1) b.append(",%LMQ%lq/nested");
        return b.toString();
    }

    static void withLightQueues(Message m, int i) {
        String names = lightQueues(i);
        if (!names.isEmpty()) m.putUserProperty("INNER_MULTI_DISPATCH", names);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        out = new PrintWriter(new FileWriter(args.length > 2 ? args[mode.equals("query") ? 3 : (mode.equals("send") ? 3 : 2)] : "/dev/stdout", StandardCharsets.UTF_8), true);
        try {
            if (mode.equals("send")) {
                Set<String> flags = new java.util.HashSet<>(Arrays.asList(args).subList(6, args.length));
                lmq = flags.contains("lmq");
                lmqSlash = flags.contains("lmqslash");
                send(args[1], args[2], Integer.parseInt(args[4]), Long.parseLong(args[5]), flags);
            } else if (mode.equals("read")) {
                read(args[1]);
            } else if (mode.equals("readlmq")) {
                readLight(args[1]);
            } else if (mode.equals("query")) {
                query(args[1], args[2]);
            } else {
                throw new IllegalArgumentException("mode " + mode);
            }
        } finally {
            out.flush();
            out.close();
        }
        System.exit(0);
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String sha1(byte[] body) throws Exception {
        byte[] d = MessageDigest.getInstance("SHA-1").digest(body);
        StringBuilder b = new StringBuilder();
        for (byte x : d) b.append(String.format("%02x", x));
        return b.toString();
    }

    static synchronized void record(String kind, SendResult r, Message m) throws Exception {
        List<String> keys = new ArrayList<>();
        if (m.getKeys() != null) for (String k : m.getKeys().split(" ")) if (!k.isEmpty()) keys.add(k);
        StringBuilder ks = new StringBuilder("[");
        for (int i = 0; i < keys.size(); i++) ks.append(i > 0 ? "," : "").append(q(keys.get(i)));
        ks.append("]");
        out.println("{\"kind\":" + q(kind) + ",\"status\":" + q(r == null ? "FAILED" : r.getSendStatus().toString())
            + ",\"msgId\":" + q(r == null ? null : r.getMsgId()) + ",\"offsetMsgId\":" + q(r == null ? null : r.getOffsetMsgId())
            + ",\"topic\":" + q(m.getTopic()) + ",\"queueId\":" + (r == null ? -1 : r.getMessageQueue().getQueueId())
            + ",\"queueOffset\":" + (r == null ? -1 : r.getQueueOffset()) + ",\"keys\":" + ks + ",\"tags\":" + q(m.getTags())
            + ",\"size\":" + m.getBody().length + ",\"sha1\":" + q(sha1(m.getBody()))
            + ",\"lmq\":" + q(m.getProperty("INNER_MULTI_DISPATCH")) + "}");
    }

    static Message message(Random rnd, String topic, int i, String tagPrefix) {
        byte[] body = new byte[SIZES[i % SIZES.length]];
        rnd.nextBytes(body);
        // Half of the bodies compress well, so the client's compression (over 4 KiB) really shrinks some.
        if (i % 2 == 0) Arrays.fill(body, 0, body.length / 2, (byte) 'a');
        Message m = new Message(topic, body);
        switch (i % 6) {
            case 0: m.setKeys("k" + i); break;
            case 1: m.setKeys(Arrays.asList("k" + i, "shared" + (i % 40), "ключ" + (i % 7))); break;
            case 2: m.setKeys("键-" + i); break;
            case 3: break;  // no key: only its unique key is indexed
            case 4: m.setKeys(Arrays.asList("k" + i, "k" + i)); break;  // the same key twice
            default: m.setKeys("order-" + (i % 100) + " k" + i);
        }
        if (i % 3 != 2) m.setTags(tagPrefix + (i % 4));
        return m;
    }

    static void send(String namesrv, String brokerAddr, int n, long seed, Set<String> flags) throws Exception {
        Random rnd = new Random(seed);
        DefaultMQAdminExt admin = new DefaultMQAdminExt("rocketidx-admin-" + seed);
        admin.setNamesrvAddr(namesrv);
        admin.start();
        String longTopic = "L" + "x".repeat(126);  // 127 characters: the longest a producer may send
        for (int t = 0; t < TOPICS.length; t++) {
            admin.createAndUpdateTopicConfig(brokerAddr, new TopicConfig(TOPICS[t], 2 + 2 * t, 2 + 2 * t, 6));
        }
        admin.createAndUpdateTopicConfig(brokerAddr, new TopicConfig(longTopic, 2, 2, 6));
        admin.createAndUpdateTopicConfig(brokerAddr, new TopicConfig("TRetry", 2, 2, 6));
        List<String> created = new ArrayList<>(Arrays.asList(TOPICS));
        created.add(longTopic);
        created.add("TRetry");
        if (flags.contains("batchcq")) {
            for (String t : BATCH_TOPICS) {
                TopicConfig tc = new TopicConfig(t, 3, 3, 6);
                // 5.x: TopicConfig.setAttributes; the "+" adds the (unchangeable) attribute at creation.
                TopicConfig.class.getMethod("setAttributes", Map.class).invoke(tc, Map.of("+queue.type", "BatchCQ"));
                admin.createAndUpdateTopicConfig(brokerAddr, tc);
                created.add(t);
            }
        }
        awaitRoutes(admin, created);

        log("topics created");
        DefaultMQProducer producer = new DefaultMQProducer("rocketidx-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(10000);
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();

        Method delayMs = null;
        if (flags.contains("timer")) delayMs = Message.class.getMethod("setDelayTimeMs", long.class);

        int i = 0;
        int batches = 0;
        for (; i < n; i++) {
            String topic = i % 50 == 7 ? longTopic : TOPICS[i % TOPICS.length];
            if (i % 97 == 13 && i + 4 < n) {
                List<Message> batch = new ArrayList<>();
                for (int j = 0; j < 4; j++) batch.add(message(rnd, TOPICS[0], i + j, "batch"));
                SendResult r = null;
                try { r = producer.send(batch); } catch (Exception e) { System.err.println("batch send failed: " + e); }
                String[] ids = r == null ? new String[0] : r.getMsgId().split(",");
                for (int j = 0; j < 4; j++) {
                    SendResult one = r;
                    if (r != null) {
                        one = new SendResult(r.getSendStatus(), ids[j], r.getOffsetMsgId() == null ? null : r.getOffsetMsgId().split(",")[j],
                                             r.getMessageQueue(), r.getQueueOffset() + j);
                    }
                    record("batch", one, batch.get(j));
                }
                i += 3;
                batches++;
                continue;
            }
            Message m = message(rnd, topic, i, "tag");
            withLightQueues(m, i);
            String kind = "normal";
            if (i % 41 == 5) { m.setDelayTimeLevel(1 + i % 3); kind = "delay"; }
            else if (delayMs != null && i % 43 == 6) { delayMs.invoke(m, 1500L + i % 1000); kind = "timer"; }
            SendResult r = null;
            try { r = producer.send(m); } catch (Exception e) { System.err.println("send failed: " + e); }
            record(kind, r, m);
        }

        log("plain sends done");
        if (flags.contains("batchcq")) {
            // Batches of 1 to 16 messages (each one record, INNER_NUM messages, on a BatchCQ topic) and plain sends.
            int k = 0;
            for (int b = 0; b < Math.max(20, n / 10); b++) {
                String topic = BATCH_TOPICS[b % BATCH_TOPICS.length];
                if (b % 4 == 3) {
                    Message m = message(rnd, topic, k++, "bcq");
                    SendResult r = null;
                    try { r = producer.send(m); } catch (Exception e) { System.err.println("bcq send failed: " + e); }
                    record("bcq-plain", r, m);
                    continue;
                }
                List<Message> batch = new ArrayList<>();
                for (int j = 0; j < 1 + (b * 7) % 16; j++) {
                    Message m = message(rnd, topic, k++, "bcq");
                    m.setBody(Arrays.copyOf(m.getBody(), Math.min(m.getBody().length, 2000)));
                    batch.add(m);
                }
                SendResult r = null;
                try { r = producer.send(batch); } catch (Exception e) { System.err.println("bcq batch send failed: " + e); }
                for (Message m : batch) record("bcq-batch", r, m);
            }
            log("batch consume queue sends done");
        }
        // Transactions: committed, rolled back, and left UNKNOW for the broker's check to settle.
        AtomicInteger checked = new AtomicInteger();
        TransactionMQProducer tx = new TransactionMQProducer("rocketidx-tx");
        tx.setNamesrvAddr(namesrv);
        tx.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                int k = (Integer) arg;
                return k % 3 == 0 ? LocalTransactionState.COMMIT_MESSAGE
                    : k % 3 == 1 ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
            }
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checked.incrementAndGet();
                return msg.getKeys() != null && msg.getKeys().endsWith("0") ? LocalTransactionState.ROLLBACK_MESSAGE
                    : LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        tx.start();
        int txn = Math.max(6, n / 50);
        int unknown = 0;
        for (int k = 0; k < txn; k++) {
            Message m = message(rnd, TOPICS[1], k, "tx");
            m.setKeys("tx" + k);
            withLightQueues(m, 3 * k + 1);
            SendResult r = null;
            try { r = tx.sendMessageInTransaction(m, k); } catch (Exception e) { System.err.println("tx send failed: " + e); }
            record(k % 3 == 0 ? "tx-commit" : k % 3 == 1 ? "tx-rollback" : "tx-unknown", r, m);
            if (k % 3 == 2) unknown++;
        }

        // Messages a consumer fails until they go to %RETRY% and then %DLQ%; on 5.x also with a group whose
        // name is over 120 characters, so its %RETRY% topic is over 127 and the broker writes V2 records.
        // The client refuses a group over 120 characters, so the long group's messages are sent back by the
        // GFail consumer on its behalf with the client's own send-back request (the broker takes the name).
        final String longGroup = flags.contains("longgroup") ? "G" + "r".repeat(124) : null;
        Map<String, Integer> attempts = new ConcurrentHashMap<>();
        AtomicInteger sentBack = new AtomicInteger();
        int failing = Math.max(4, n / 200);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("GFail");
        c.setNamesrvAddr(namesrv);
        c.setMaxReconsumeTimes(2);
        c.subscribe("TRetry", "*");
        c.setConsumeFromWhere(org.apache.rocketmq.common.consumer.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (attempts.merge(m.getMsgId(), 1, Integer::sum) == 1 && longGroup != null) {
                    try {
                        c.getDefaultMQPushConsumerImpl().getmQClientFactory().getMQClientAPIImpl().consumerSendMessageBack(
                            brokerAddr, "broker-a", m, longGroup, 0, 5000, 2);
                        sentBack.incrementAndGet();
                    } catch (Exception e) { System.err.println("send back failed: " + e); }
                }
            }
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        createGroup(admin, brokerAddr, "GFail");
        if (longGroup != null) {
            // 5.5 refuses a group over 120 characters (code 29), so no retry topic over 127 can arise there.
            try { createGroup(admin, brokerAddr, longGroup); }
            catch (Exception e) { log("long group refused: " + (e.getCause() != null ? e.getCause() : e).toString().split("\n")[0]); }
        }
        c.start();
        log("sends done; failing consumer started");
        for (int k = 0; k < failing; k++) {
            Message m = message(rnd, "TRetry", k, "retry");
            m.setKeys("retry" + k);
            withLightQueues(m, 3 * k + 1);
            SendResult r = null;
            try { r = producer.send(m); } catch (Exception e) { System.err.println("send failed: " + e); }
            record("retry", r, m);
        }
        // The retries settle in seconds; the broker's check of the halves left UNKNOW may not come at all
        // (5.5 ran none in a minute), so it is waited for 15 s at most.
        long start = System.currentTimeMillis(), end = start + 60000;
        while (System.currentTimeMillis() < end) {
            long done = attempts.values().stream().filter(a -> a >= 3).count();
            if (done >= failing && (checked.get() >= unknown || System.currentTimeMillis() > start + 15000)) break;
            Thread.sleep(200);
        }
        log("retries and checks done: " + attempts + " checked " + checked.get());
        Thread.sleep(4000);  // the last RECONSUME_LATER reaches %DLQ%; delayed and timer messages come due
        System.err.println("batches=" + batches + " checked=" + checked.get() + "/" + unknown + " failed=" + attempts.size() + " sentBack=" + sentBack.get());
        c.shutdown();
        tx.shutdown();
        producer.shutdown();
        admin.shutdown();
    }

    static final long T0 = System.currentTimeMillis();

    static void log(String what) {
        System.err.println(String.format("%6.1f s  %s", (System.currentTimeMillis() - T0) / 1000.0, what));
    }

    /** A subscription group on the broker; its class moved between 4.9 and 5.x, so it is made by reflection. */
    static void createGroup(DefaultMQAdminExt admin, String brokerAddr, String group) throws Exception {
        for (Method m : DefaultMQAdminExt.class.getMethods()) {
            if (!m.getName().equals("createAndUpdateSubscriptionGroupConfig") || m.getParameterCount() != 2) continue;
            Object conf = m.getParameterTypes()[1].getConstructor().newInstance();
            conf.getClass().getMethod("setGroupName", String.class).invoke(conf, group);
            conf.getClass().getMethod("setRetryMaxTimes", int.class).invoke(conf, 2);
            m.invoke(admin, brokerAddr, conf);
            return;
        }
        throw new IllegalStateException("no createAndUpdateSubscriptionGroupConfig");
    }

    /** Waits until the namesrv routes every topic just created: the broker registers them asynchronously, and
     * on a loaded machine that takes seconds, so a fixed pause let whole workloads fail with "No route info". */
    static void awaitRoutes(DefaultMQAdminExt admin, List<String> topics) throws Exception {
        long end = System.currentTimeMillis() + 60000;
        for (String topic : topics) {
            while (true) {
                try { if (!admin.examineTopicRouteInfo(topic).getQueueDatas().isEmpty()) break; }
                catch (Exception e) { if (System.currentTimeMillis() > end) throw e; }
                if (System.currentTimeMillis() > end) throw new IllegalStateException("no route for " + topic + " after 60 s");
                Thread.sleep(200);
            }
        }
    }

    /** The namesrv's topics once the broker has registered its own: a broker just restarted after a kill -9
     * registers a moment after it says boot success, and until then the namesrv lists none of them. */
    static Set<String> waitForRoutes(DefaultMQAdminExt admin) throws Exception {
        long end = System.currentTimeMillis() + 60000;
        while (true) {
            Set<String> topics = admin.fetchAllTopicList().getTopicList();
            if (topics.contains(TOPICS[0]) || System.currentTimeMillis() > end) return topics;
            Thread.sleep(300);
        }
    }

    static void read(String namesrv) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt("rocketidx-read-admin");
        admin.setNamesrvAddr(namesrv);
        admin.start();
        var topics = waitForRoutes(admin);
        admin.shutdown();
        DefaultMQPullConsumer c = new DefaultMQPullConsumer("rocketidx-reader");
        c.setNamesrvAddr(namesrv);
        c.start();
        for (String topic : new java.util.TreeSet<>(topics)) {
            Set<MessageQueue> mqs;
            try { mqs = c.fetchSubscribeMessageQueues(topic); }
            catch (Exception e) { out.println("{\"topic\":" + q(topic) + ",\"error\":" + q(e.getClass().getSimpleName() + ": " + e.getMessage()) + "}"); continue; }
            for (MessageQueue mq : mqs) {
                long min, max;
                try { min = c.minOffset(mq); max = c.maxOffset(mq); }
                catch (Exception e) { out.println("{\"topic\":" + q(topic) + ",\"queueId\":" + mq.getQueueId() + ",\"error\":" + q(e.toString()) + "}"); continue; }
                out.println("{\"topic\":" + q(topic) + ",\"queueId\":" + mq.getQueueId() + ",\"min\":" + min + ",\"max\":" + max + "}");
                long off = min;
                int stuck = 0;
                while (off < max && stuck < 3) {
                    PullResult r;
                    try { r = c.pull(mq, "*", off, 32); }
                    catch (Exception e) { out.println("{\"topic\":" + q(topic) + ",\"queueId\":" + mq.getQueueId() + ",\"at\":" + off + ",\"error\":" + q(e.toString()) + "}"); stuck++; continue; }
                    if (r.getPullStatus() == PullStatus.FOUND) {
                        for (MessageExt m : r.getMsgFoundList()) {
                            out.println("{\"topic\":" + q(topic) + ",\"queueId\":" + m.getQueueId() + ",\"queueOffset\":" + m.getQueueOffset()
                                + ",\"phy\":" + m.getCommitLogOffset() + ",\"msgId\":" + q(m.getMsgId()) + ",\"sha1\":" + q(sha1(m.getBody())) + "}");
                        }
                    } else {
                        out.println("{\"topic\":" + q(topic) + ",\"queueId\":" + mq.getQueueId() + ",\"at\":" + off + ",\"status\":" + q(r.getPullStatus().toString()) + ",\"next\":" + r.getNextBeginOffset() + "}");
                    }
                    if (r.getNextBeginOffset() <= off) stuck++;
                    off = Math.max(off, r.getNextBeginOffset());
                }
            }
        }
        c.shutdown();
    }

    /** Every light queue of the workload (%LMQ%lqN, queue 0 on the broker of TOPICS[0]): its min and max
     * offsets, and each message a pull from min to max returns (the pulled message is the parent topic's record:
     * its CommitLog offset and id say which). */
    static void readLight(String namesrv) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt("rocketidx-readlmq-admin");
        admin.setNamesrvAddr(namesrv);
        admin.start();
        waitForRoutes(admin);
        admin.shutdown();
        DefaultMQPullConsumer c = new DefaultMQPullConsumer("rocketidx-lmq-reader");
        c.setNamesrvAddr(namesrv);
        c.start();
        String brokerName = c.fetchSubscribeMessageQueues(TOPICS[0]).iterator().next().getBrokerName();
        // A light queue has no route: a pull from a routed topic first puts the broker's address in the client.
        c.pull(new MessageQueue(TOPICS[0], brokerName, 0), "*", 0, 1);
        for (int q = 0; q < LIGHT_QUEUES; q++) {
            String name = "%LMQ%lq" + q;
            MessageQueue mq = new MessageQueue(name, brokerName, 0);
            long min, max;
            try { min = c.minOffset(mq); max = c.maxOffset(mq); }
            catch (Exception e) { out.println("{\"lmq\":" + q(name) + ",\"error\":" + q(e.toString()) + "}"); continue; }
            out.println("{\"lmq\":" + q(name) + ",\"min\":" + min + ",\"max\":" + max + "}");
            long off = min;
            int stuck = 0;
            while (off < max && stuck < 3) {
                PullResult r;
                try { r = c.pull(mq, "*", off, 32); }
                catch (Exception e) { out.println("{\"lmq\":" + q(name) + ",\"at\":" + off + ",\"error\":" + q(e.toString()) + "}"); stuck++; continue; }
                if (r.getPullStatus() == PullStatus.FOUND) {
                    for (MessageExt m : r.getMsgFoundList()) {
                        out.println("{\"lmq\":" + q(name) + ",\"phy\":" + m.getCommitLogOffset() + ",\"topic\":" + q(m.getTopic())
                            + ",\"msgId\":" + q(m.getMsgId()) + ",\"sha1\":" + q(sha1(m.getBody())) + "}");
                    }
                } else {
                    out.println("{\"lmq\":" + q(name) + ",\"at\":" + off + ",\"status\":" + q(r.getPullStatus().toString()) + ",\"next\":" + r.getNextBeginOffset() + "}");
                }
                if (r.getNextBeginOffset() <= off) stuck++;
                off = Math.max(off, r.getNextBeginOffset());
            }
        }
        c.shutdown();
    }

    /** 4.9's queryMessageByUniqKey(topic, key, maxNum, begin, end); 5.x put the cluster's name first. */
    static QueryResult byUniqKey(DefaultMQAdminExt admin, String topic, String key) throws Exception {
        for (Method m : DefaultMQAdminExt.class.getMethods()) {
            if (!m.getName().equals("queryMessageByUniqKey")) continue;
            if (m.getParameterCount() == 5) return (QueryResult) m.invoke(admin, topic, key, 64, 0L, Long.MAX_VALUE);
            if (m.getParameterCount() == 6) return (QueryResult) m.invoke(admin, "rocketidx", topic, key, 64, 0L, Long.MAX_VALUE);
        }
        throw new IllegalStateException("no queryMessageByUniqKey");
    }

    /** 5.4+: queryMessage(cluster, topic, key, maxNum, begin, end, keyType, lastKey) with key type "T". */
    static QueryResult byTag(DefaultMQAdminExt admin, String topic, String tag) throws Exception {
        for (Method m : DefaultMQAdminExt.class.getMethods()) {
            if (m.getName().equals("queryMessage") && m.getParameterCount() == 8) {
                return (QueryResult) m.invoke(admin, "rocketidx", topic, tag, 64, 0L, Long.MAX_VALUE, "T", null);
            }
        }
        throw new IllegalStateException("this client has no tag query");
    }

    static void query(String namesrv, String in) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt("rocketidx-query-admin");
        admin.setNamesrvAddr(namesrv);
        admin.start();
        waitForRoutes(admin);
        try (BufferedReader r = new BufferedReader(new FileReader(in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                String[] w = line.split("\t");
                StringBuilder b = new StringBuilder("{\"topic\":" + q(w[0]) + ",\"key\":" + q(w[1]) + ",\"kind\":" + q(w[2]));
                try {
                    QueryResult res = w[2].equals("uniq") ? byUniqKey(admin, w[0], w[1])
                        : w[2].equals("tag") ? byTag(admin, w[0], w[1])
                        : admin.queryMessage(w[0], w[1], 64, 0, Long.MAX_VALUE);
                    b.append(",\"phy\":[");
                    List<MessageExt> found = res.getMessageList();
                    for (int i = 0; i < found.size(); i++) b.append(i > 0 ? "," : "").append(found.get(i).getCommitLogOffset());
                    b.append("]");
                } catch (Exception e) {
                    Throwable c = e instanceof java.lang.reflect.InvocationTargetException && e.getCause() != null ? e.getCause() : e;
                    b.append(",\"error\":" + q(c.getClass().getSimpleName() + ": " + c.getMessage()));
                }
                out.println(b.append("}"));
            }
        }
        admin.shutdown();
    }
}
