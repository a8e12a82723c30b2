// Reads Avro binary bodies with Apache Avro for Java (the reference implementation), resolving each
// body's writer schema against one reader schema, as a Java consumer on that reader schema would.
// Run by tests/support/avro_java.py in source-file mode: `java -cp <avro jars>/* AvroRead.java`.
//
// stdin, one item per line, base64 of UTF-8 text or of bytes:
//   line 1: the reader schema (JSON)
//   then:   <writer schema JSON> <space> <body>    (the body without any framing header)
// stdout: one line per body, GenericData's JSON rendering of the decoded datum; a failure exits 1
// with the exception on stderr.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;

public class AvroRead {
    public static void main(String[] args) throws Exception {
        Base64.Decoder b64 = Base64.getDecoder();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Schema reader = new Schema.Parser().parse(new String(b64.decode(in.readLine()), StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] parts = line.split(" ", 2);
            Schema writer = new Schema.Parser().parse(new String(b64.decode(parts[0]), StandardCharsets.UTF_8));
            byte[] body = b64.decode(parts[1]);
            BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(body, null);
            Object datum = new GenericDatumReader<Object>(writer, reader).read(null, decoder);
            System.out.println(GenericData.get().toString(datum));
        }
    }
}
