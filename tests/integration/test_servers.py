"""The real servers that broker and ledger tests rely on are reachable (found or started)."""

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.redis
def test_redis_answers_ping(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    assert client.ping() is True
    client.set("cascade:test:ping", "1", ex=10)
    assert client.get("cascade:test:ping") == b"1"


@pytest.mark.rabbitmq
def test_rabbitmq_accepts_an_amqp_connection(rabbitmq_url):
    import amqp

    conn = amqp.Connection(host="127.0.0.1:5672", userid="guest", password="guest", connect_timeout=10)
    conn.connect()
    channel = conn.channel()
    channel.queue_declare("cascade.test.ping", auto_delete=True)
    channel.basic_publish(amqp.Message("hello"), routing_key="cascade.test.ping")
    msg = channel.basic_get("cascade.test.ping", no_ack=True)
    assert msg is not None and msg.body in ("hello", b"hello")
    conn.close()


@pytest.mark.postgres
def test_postgres_runs_a_query(postgres_url):
    import psycopg

    with psycopg.connect(postgres_url.replace("postgresql+psycopg", "postgresql"), connect_timeout=10) as conn:
        assert conn.execute("select 1 + 1").fetchone()[0] == 2
