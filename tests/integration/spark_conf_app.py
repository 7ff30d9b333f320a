"""A spark-submit application for test_spark_conf_precedence: builds the platform's session and writes the
settings it ended with as JSON to argv[1]. Usage: spark-submit [--conf k=v ...] spark_conf_app.py OUT.json"""

import json
import sys

from aldebaran.runtime import spark as sparkmod


def main() -> None:
    session = sparkmod.session("aldebaran-conf-precedence", conf={"spark.sql.adaptive.enabled": "false"})
    try:
        conf = dict(session.sparkContext.getConf().getAll())
        conf["runtime:spark.sql.session.timeZone"] = session.conf.get("spark.sql.session.timeZone")
        with open(sys.argv[1], "w") as out:
            json.dump(conf, out)
    finally:
        session.stop()


if __name__ == "__main__":
    main()
