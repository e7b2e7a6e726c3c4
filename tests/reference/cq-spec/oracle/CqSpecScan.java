/*
 * Helper driver for tests/cq_spec_cases.py (not RocketMQ code, not part of ../shared/oracle): prints what
 * the oracle's CommitLogScan reads, one TSV line per record, so the generator can check that every
 * CommitLog it writes is read as intended. CommitLogScan itself hands each record to RocketMQ's own
 * CommitLog.checkMessageAndReturnSize(buffer, checkCRC=true, checkDupInfo=false); the shared oracle's
 * CommitLogScan class has no main method, hence this wrapper.
 *
 *   java -cp ORACLE_CP:THIS_DIR [-Doracle.messageDelayLevel=...] oracle.CqSpecScan COMMITLOG_DIR
 *
 * Output: "rec" <topic as UTF-8 hex> <queueId> <queueOffset> <commitLogOffset> <size> <tagsCode>
 *         <storeTimestamp> <sysFlag> <batchSize> <msgBaseOffset>
 * then    "end" <records> <blanks> <bytesParsed> <stop as CommitLogScan.Stop.toString()>
 */
package oracle;

import java.io.File;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.store.config.MessageStoreConfig;

public final class CqSpecScan {
    public static void main(String[] args) throws Exception {
        MessageStoreConfig config = new MessageStoreConfig();
        if (System.getProperty("oracle.messageDelayLevel") != null) {
            config.setMessageDelayLevel(System.getProperty("oracle.messageDelayLevel"));
        }
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        CommitLogScan scan = new CommitLogScan(config);
        scan.scan(new File(args[0]), r -> out.println(String.join("\t", "rec",
            ConsumeQueueRead.hex(r.getTopic()), String.valueOf(r.getQueueId()),
            String.valueOf(r.getConsumeQueueOffset()), String.valueOf(r.getCommitLogOffset()),
            String.valueOf(r.getMsgSize()), String.valueOf(r.getTagsCode()), String.valueOf(r.getStoreTimestamp()),
            String.valueOf(r.getSysFlag()), String.valueOf(r.getBatchSize()), String.valueOf(r.getMsgBaseOffset()))));
        out.println(String.join("\t", "end", String.valueOf(scan.records), String.valueOf(scan.blanks),
            String.valueOf(scan.bytesParsed), scan.stop.toString()));
        out.flush();
    }
}
