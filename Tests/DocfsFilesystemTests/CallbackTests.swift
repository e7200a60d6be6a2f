import DocfsCore
import Synchronization
import Testing

/// `Callback` (a closure kept in a `Mutex` was re-wrapped by every call, so a handler called
/// once per write session grew deeper with each session until the daemon's stack ran out).
@Suite struct CallbackTests {
    @Test func aCallbackIsAsDeepOnItsHundredThousandthCallAsOnItsFirst() {
        let callback = Callback<Int>()
        let depths = Mutex<[Int: Int]>([:])  // where the callback's frame is on the stack
        let total = Atomic<Int>(0)
        callback.set { call in
            total.add(1, ordering: .relaxed)
            guard call == 1 || call == 100_000 else { return }
            var local = call
            let depth = withUnsafePointer(to: &local) { Int(bitPattern: $0) }
            depths.withLock { $0[call] = depth }
        }
        for call in 1...100_000 { callback(call) }
        #expect(total.load(ordering: .relaxed) == 100_000)
        let measured = depths.withLock { $0 }
        #expect(measured[1] != nil && measured[1] == measured[100_000], "stack depth at the first and last call: \(measured)")
    }

    @Test func anUnsetCallbackDoesNothingAndASetOneCanBeReplaced() {
        let callback = Callback<String>()
        callback("nobody listens")
        let heard = Mutex<[String]>([])
        callback.set { text in heard.withLock { $0.append("first: " + text) } }
        callback("a")
        callback.set { text in heard.withLock { $0.append("second: " + text) } }
        callback("b")
        #expect(heard.withLock { $0 } == ["first: a", "second: b"])
    }
}
