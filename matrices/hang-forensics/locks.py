"""Two threads that take two locks in opposite orders: a lock-order deadlock."""
import threading
import time

a = threading.Lock()
b = threading.Lock()


def take_a_then_b():
    with a:
        time.sleep(0.2)
        with b:
            pass


def take_b_then_a():
    with b:
        time.sleep(0.2)
        with a:
            pass


first = threading.Thread(target=take_a_then_b, name="first")
second = threading.Thread(target=take_b_then_a, name="second")
first.start()
second.start()
print("both threads started", flush=True)
first.join()
