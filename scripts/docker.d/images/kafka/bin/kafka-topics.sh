#!/usr/bin/env bash
# As Kafka's own script: create, list, describe and delete topics.
exec java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
  -Dlog4j2.configurationFile=/opt/kafka/config/tools-log4j2.xml \
  -cp '/opt/kafka/libs/*' org.apache.kafka.tools.TopicCommand "$@"
